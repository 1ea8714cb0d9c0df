"""The `tuner` command line: help, shapes, and one-line errors with exit code 2.

Tables at 80 columns: a number or a header word is never split or cut, text wraps between
words, optional columns go first and a line says so; `tuner status`'s sweeps and tasks read
back from rows."""

from __future__ import annotations

import json
import re

import pytest
import typer.main
from rich.console import Console

from db.connection import open_store
from tests.cli.common import PLAN, invoke, ok, one_line_error, query, table_rows
from tests.storefill import DEFAULT, FAST, SLOW, fill
from tests.test_docs_commands import _leaf_paths
from tuner.cli import output
from tuner.cli.app import app
from tuner.cli.arguments import parse_m_values
from tuner.cli.tables import Column, fitted_columns, min_width, print_table
from tuner.files.provenance import current_kernel_hash, installed_triton_minor
from tuner.kernels.dense.family import config_file_name


def test_help_lists_the_commands():
    """Every command typer knows (the README's table lists each: tests/test_docs_commands.py)."""
    result = ok("--help")
    commands = typer.main.get_command(app).commands
    assert len(commands) > 10
    for name, command in commands.items():
        assert command.hidden or name in result.stdout
    sweep_help = " ".join(invoke("sweep", "--help").stdout.split())
    assert "--strategy" in sweep_help and "--trials" in sweep_help and "TUNER_DB_URL" in sweep_help


def test_parse_m_values():
    assert parse_m_values("32, 1,16,1") == (1, 16, 32)
    with pytest.raises(ValueError, match="'0' is not a positive integer"):
        parse_m_values("1,0")
    assert parse_m_values("1048576") == (2**20,)
    with pytest.raises(ValueError, match="100000000 is larger than 1,048,576 tokens"):
        parse_m_values("1,100000000")


def test_shapes_list_and_show():
    listed = ok("shapes", "list")
    for model in ("qwen3.8-27b", "deepseek-v3", "tiny"):
        assert model in listed.stdout
    shown = ok("shapes", "show", "qwen3.8-27b", "--tp", "2")
    for n, k in ((17408, 5120), (5120, 3072), (5120, 8704), (7168, 5120), (8192, 5120)):
        assert re.search(rf"\b{n}\s*│\s*{k}\b", shown.stdout)
    # One source for the TP size (the README says so), not one per shape.
    assert [line for line in shown.stdout.splitlines() if "source" in line] == [
        "source: field report: vLLM 'Config file not found' warnings, Qwen3.8-27B-FP8, TP 2, "
        "2x NVIDIA L20 (field report in README.md, Why)"
    ]


def test_db_upgrade_creates_the_schema_an_old_one_asks_for(tmp_path):
    query(tmp_path / "old.db", "CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
    query(tmp_path / "old.db", "INSERT INTO alembic_version VALUES ('0000')")
    old = f"sqlite:///{tmp_path}/old.db"
    result = invoke("export", "--device", "L20", "--out", tmp_path / "out", "--db", old, code=2)
    assert result.stderr.count("\n") == 1
    assert "schema revision 0000" in result.stderr and "run `tuner db upgrade`" in result.stderr
    ok("db", "upgrade", "--db", f"sqlite:///{tmp_path}/new.db")
    tables = {name for (name,) in query(tmp_path / "new.db", "SELECT name FROM sqlite_master")}
    assert {"devices", "environments", "sweeps", "tasks", "trials"} <= tables


def _stale_store(tmp_path):
    """One shape over M = 1, 16 on NVIDIA_L20. M=1: current trials (default 10 us, FAST 8 us)
    and a faster trial of an older kernel (SLOW, 5 us); M=16: trials of the older kernel only."""
    url = f"sqlite:///{tmp_path / 'stale.db'}"
    one = [(DEFAULT, True, "ok", 10.0), (FAST, False, "ok", 8.0), (SLOW, False, "ok", 5.0)]
    sixteen = [(DEFAULT, True, "ok", 20.0), (FAST, False, "ok", 15.0)]
    fill(url, {(5120, 3072, 1): one, (5120, 3072, 16): sixteen}, model="m", m_values=(1, 16))
    query(  # a copy of its environment, another kernel
        tmp_path / "stale.db",
        "INSERT INTO environments (device_id, gpu_name, compute_capability, driver, cuda, "
        "torch, triton, tuner, kernel_hash) SELECT device_id, gpu_name, compute_capability, "
        "driver, cuda, torch, triton, tuner, '0ld' FROM environments",
    )
    query(
        tmp_path / "stale.db",
        "UPDATE trials SET environment_id = environment_id + 1 WHERE latency_us IN (5, 20, 15)",
    )
    return url


STALE_NOTE = (
    "note: left out 3 ok trial(s) of NVIDIA_L20 timed with another kernel or Triton "
    "than the current (builtin kernel {kernel}, triton {triton}); --allow-stale uses "
    "them, --kernel picks the source"
)


def test_export_winners_and_mounts_keep_to_current_trials_unless_allow_stale(tmp_path, monkeypatch):
    monkeypatch.setattr(output.console, "_width", 220)  # one table row per line
    db = _stale_store(tmp_path)
    note = STALE_NOTE.format(kernel=current_kernel_hash()[:12], triton=installed_triton_minor())
    name = config_file_name(5120, 3072, "NVIDIA_L20")
    export = ["export", "--device", "L20", "--db", db, "--out"]
    refused = invoke(*export, tmp_path / "a", code=1)
    assert refused.stderr.splitlines() == [
        note,
        f"winners of builtin kernel trials, triton {installed_triton_minor()}",
        "skipped N=5120,K=3072: no winner yet for M=16; M=16 only have trials of another kernel "
        "or Triton (--allow-stale uses them)",
        "error: no file written",
    ]
    ok(*export, tmp_path / "b", "--allow-partial")
    assert json.loads((tmp_path / "b" / name).read_text()) == {"1": FAST}
    stale = ok(*export, tmp_path / "c", "--allow-stale")
    assert stale.stderr == ("winners of trials of every kernel source and Triton (--allow-stale)\n")
    assert json.loads((tmp_path / "c" / name).read_text()) == {"1": SLOW, "16": FAST}
    current = ok("winners", "--device", "L20", "--db", db)
    rows = table_rows(current.stdout)
    assert rows == [["5120", "3072", "1", "16x64x128 g1 w4 s3", "8.0", "10.0", "1.25x", "-"]]
    assert current.stderr.splitlines() == [note]
    stale = invoke("winners", "--device", "L20", "--db", db, "--allow-stale")
    assert [row[2:6] for row in table_rows(stale.stdout)] == [
        ["1", "128x256x128 g64 w8 s5", "5.0", "10.0"],
        ["16", "16x64x128 g1 w4 s3", "15.0", "20.0"],
    ]
    assert stale.stderr == ""
    refused = invoke("mounts", "--device", "L20", "--db", db, code=1)
    assert refused.stderr.splitlines() == [
        "error: NVIDIA_L20 has no complete file to mount yet (partial files and stale trials can "
        "be allowed); 3 ok trial(s) of another kernel or Triton left out",
    ]
    mounted = ok("mounts", "--device", "L20", "--db", db, "--allow-stale")
    assert "N=5120,K=3072,device_name=NVIDIA_L20" in mounted.stdout


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


def test_widths_keep_numbers_and_words_whole_fold_long_words_and_drop_optional_columns() -> None:
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
def store(db: str) -> str:
    rows = [(DEFAULT, True, "ok", 144072.7), (FAST, False, "ok", 120000.25)]
    fill(db, {(17408, 5120, m): [*rows, (SLOW, False, "ok", 150000.0)] for m in (1, 16, 32)})
    return db


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
