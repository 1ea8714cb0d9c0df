"""Tables at 80 columns: a number or a header word is never split or cut, text wraps between
words, optional columns go first and a line says so; `tuner status`'s sweeps and tasks read
back from rows."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer.main
from rich.console import Console

from db.connection import open_store
from tests.cli.common import PLAN, invoke, ok, one_line_error, table_rows
from tests.storefill import DEFAULT, FAST, SLOW, fill
from tests.test_docs_commands import _leaf_paths
from tuner.cli import output
from tuner.cli.app import app
from tuner.cli.tables import Column, fitted_columns, min_width, print_table

COLUMNS = [
    Column("N"),
    Column("config", text=True),
    Column("latency_us"),
    Column("spread_us", optional=True),
    Column("GB/s", optional=True),
]
ROWS = [["17408", "16x64x128 g1 w4 s3", "120000.2", "0.25", "1536.2"]]


def printed(width: int, columns: list[Column], rows: list[list[str]]) -> list[str]:
    console = Console(width=width, record=True, color_system=None)
    print_table(console, columns, rows)
    return console.export_text().splitlines()


def test_widths_keep_numbers_and_words_whole_and_drop_the_last_optional_first() -> None:
    assert min_width(Column("latency_us"), ["120000.2", "10.2"]) == 10
    assert min_width(Column("trials ok/total"), ["15/15"]) == 8
    assert min_width(Column("config", text=True), ["16x64x128 g1 w4 s3"]) == 9
    assert min_width(Column("verdict", text=True), ["[red]failed[/red]: boom"]) == 7
    # 5 + 9 + 10 + 9 + 6 wide, 3 between columns: 39 + 12 = 51.
    assert [fitted_columns(w, COLUMNS, ROWS) for w in (51, 50, 40, 10)] == [
        [0, 1, 2, 3, 4],
        [0, 1, 2, 3],
        [0, 1, 2],
        [0, 1, 2],  # nothing more to drop
    ]
    lines = printed(40, COLUMNS, ROWS)
    assert all(len(line) <= 40 for line in lines) and "latency_us" in lines[0]
    assert any(re.search(r"\b17408\b.*\b120000\.2\b", line) for line in lines)
    assert " ".join(" ".join(lines[-2:]).split()) == (
        "(spread_us, GB/s left out at 40 columns; a wider terminal shows them)"
    )


def test_a_word_too_long_for_80_columns_folds_and_keeps_the_last_column() -> None:
    # A device name without spaces must not push "trials ok/total" off the edge when piped.
    headers = ["sweep", "device", "model", "TP", "strategy", "tasks done", "running", "failed"]
    columns = [Column(h, text=h in ("device", "model", "strategy")) for h in headers]
    columns[6] = Column("running", optional=True)
    columns.append(Column("trials ok/total"))
    row = ["3", "Intel(R)_Data_Center_GPU_Max_1550", "deepseek-v3", "8", "guided", "1/180"]
    assert printed(80, columns, [[*row, "1", "0", "11520/23040"]]) == [
        "                                                    tasks                 trials",
        "sweep   device        model         TP   strategy    done   failed      ok/total",
        "─" * 80,
        "    3   Intel(R)_Da   deepseek-v3    8   guided     1/180        0   11520/23040",
        "        ta_Center_G" + " " * 61,
        "        PU_Max_1550" + " " * 61,
        "(running left out at 80 columns; a wider terminal shows them)",
    ]


@pytest.fixture
def store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path}/tuner.db"
    rows = [(DEFAULT, True, "ok", 144072.7), (FAST, False, "ok", 120000.25)]
    fill(url, {(17408, 5120, m): [*rows, (SLOW, False, "ok", 150000.0)] for m in (1, 16, 32)})
    return url


@pytest.mark.parametrize("command", ["winners --device L20", "status", "status --sweep 1"])
def test_commands_fit_80_columns(store: str, command: str, monkeypatch) -> None:
    monkeypatch.setattr(output.console, "_width", 80)
    result = ok(*command.split(), "--db", store)
    lines = result.stdout.splitlines()
    assert lines and all(len(line) <= 80 for line in lines)
    assert "…" not in result.stdout
    if command.startswith("winners"):
        assert any("120000.2" in line and "144072.7" in line for line in lines)
        assert any("latency_us" in line and "spread_us" in line for line in lines)


@pytest.mark.parametrize(
    "command", [leaf.split()[1:] for leaf in _leaf_paths(typer.main.get_command(app))], ids=" ".join
)
def test_help_fits_80_columns_uncut(command: list[str]) -> None:
    result = ok(*command, "--help", env={"COLUMNS": "80"}, terminal_width=80)
    assert "…" not in result.stdout
    assert all(len(line) <= 80 for line in result.stdout.splitlines())


def test_status(db, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(output.console, "_width", 220)  # one table row per line
    open_store(db).dispose()  # an empty store
    assert "no sweeps in the store yet" in invoke("status", "--db", db).stdout
    sweep_id = fill(db, PLAN, m_values=(1, 16, 32), fail_m=(32,))
    table = invoke("status", "--db", db)
    assert table_rows(table.stdout) == [
        [str(sweep_id), "NVIDIA_L20", "test-model", "2", "grid", "2/3", "0", "0", "1", "4/4"]
    ]
    tasks = invoke("status", "--db", db, "--sweep", str(sweep_id))
    assert [r[:9] for r in table_rows(tasks.stdout, first="576")] == [
        ["576", "7168", "1", "done", "1", "2/2", "6.0", "10.0", "1.67x"],
        ["576", "7168", "16", "done", "1", "2/2", "10.0", "10.0", "1.00x"],
        ["576", "7168", "32", "failed", "1", "0/0", "-", "-", "-"],
    ]
    missing = invoke("status", "--db", db, "--sweep", "99")
    one_line_error(missing, f"no sweep with id 99; sweeps: {sweep_id}")
