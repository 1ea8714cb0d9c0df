"""Tables at 80 columns: a number or a header word is never split or cut, text
wraps between words, optional columns go first and a line says so."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from tests.storefill import DEFAULT, FAST, SLOW, fill
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


def test_min_width_is_the_widest_number_or_word() -> None:
    assert min_width(Column("latency_us"), ["120000.2", "10.2"]) == 10
    assert min_width(Column("trials ok/total"), ["15/15"]) == 8
    assert min_width(Column("config", text=True), ["16x64x128 g1 w4 s3"]) == 9
    assert min_width(Column("verdict", text=True), ["[red]failed[/red]: boom"]) == 7


def test_optional_columns_go_last_first_until_the_table_fits() -> None:
    # 5 + 9 + 10 + 9 + 6 wide, 3 between columns: 39 + 12 = 51.
    assert fitted_columns(51, COLUMNS, ROWS) == [0, 1, 2, 3, 4]
    assert fitted_columns(50, COLUMNS, ROWS) == [0, 1, 2, 3]
    assert fitted_columns(40, COLUMNS, ROWS) == [0, 1, 2]
    assert fitted_columns(10, COLUMNS, ROWS) == [0, 1, 2]  # nothing more to drop


def test_print_table_keeps_numbers_whole_and_says_what_it_left_out() -> None:
    console = Console(width=40, record=True, color_system=None)
    print_table(console, COLUMNS, ROWS)
    lines = console.export_text().splitlines()
    assert all(len(line) <= 40 for line in lines)
    assert any(re.search(r"\b17408\b.*\b120000\.2\b", line) for line in lines)
    assert (
        " ".join(" ".join(lines[-2:]).split())
        == "(spread_us, GB/s left out at 40 columns; a wider terminal shows them)"
    )
    assert "latency_us" in lines[0]


@pytest.fixture
def store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path}/tuner.db"
    plan = {
        (17408, 5120, m): [
            (DEFAULT, True, "ok", 144072.7),
            (FAST, False, "ok", 120000.25),
            (SLOW, False, "ok", 150000.0),
        ]
        for m in (1, 16, 32)
    }
    fill(url, plan)
    return url


@pytest.mark.parametrize(
    "command", [["winners", "--device", "L20"], ["status"], ["status", "--sweep", "1"]]
)
def test_commands_fit_80_columns(
    store: str, command: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(output.console, "_width", 80)
    result = CliRunner().invoke(app, [*command, "--db", store])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines and all(len(line) <= 80 for line in lines)
    assert "…" not in result.stdout
    if command[0] == "winners":
        assert any("120000.2" in line and "144072.7" in line for line in lines)
        assert any("latency_us" in line and "default_us" in line for line in lines)
        assert lines[-1] == "(GB/s, TFLOP/s left out at 80 columns; a wider terminal shows them)"


def _commands() -> list[list[str]]:
    import typer.main

    group = typer.main.get_command(app)
    found = []
    for name, command in group.commands.items():
        subcommands = getattr(command, "commands", None)
        found += [[name, sub] for sub in subcommands] if subcommands else [[name]]
    return found


@pytest.mark.parametrize("command", _commands(), ids=" ".join)
def test_help_fits_80_columns_uncut(command: list[str]) -> None:
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "80"}, terminal_width=80)
    assert result.exit_code == 0, result.output
    assert "…" not in result.stdout
    assert all(len(line) <= 80 for line in result.stdout.splitlines())


def test_a_word_too_long_for_80_columns_folds_and_keeps_the_last_column() -> None:
    # A device name without spaces must not push "trials ok/total" off the edge when piped.
    columns = [
        Column("sweep"),
        Column("device", text=True),
        Column("model", text=True),
        Column("TP"),
        Column("strategy", text=True),
        Column("tasks done"),
        Column("running", optional=True),
        Column("failed"),
        Column("trials ok/total"),
    ]
    rows = [
        [
            "3",
            "Intel(R)_Data_Center_GPU_Max_1550",
            "deepseek-v3",
            "8",
            "guided",
            "1/180",
            "1",
            "0",
            "11520/23040",
        ]
    ]
    console = Console(width=80, record=True, color_system=None)
    print_table(console, columns, rows)
    lines = console.export_text().splitlines()
    assert lines == [
        "                                                    tasks                 trials",
        "sweep   device        model         TP   strategy    done   failed      ok/total",
        "─" * 80,
        "    3   Intel(R)_Da   deepseek-v3    8   guided     1/180        0   11520/23040",
        "        ta_Center_G" + " " * 61,
        "        PU_Max_1550" + " " * 61,
        "(running left out at 80 columns; a wider terminal shows them)",
    ]
