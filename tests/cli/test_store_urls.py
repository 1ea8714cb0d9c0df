"""Every command that takes --db reads the store URL in one place (`tuner.cli.store`):
`postgres://` and `postgresql://` mean psycopg's `postgresql+psycopg://`; a missing driver, a
database other than SQLite or PostgreSQL, a server that does not answer and (for the commands
that only read, `tuner serve` among them) a SQLite file that does not exist are each one line on
stderr with the fix and exit 2, and nothing is created on disk. `sweep --dry-run` against a
server that does not answer is refused, not planned as if the store were empty.

`tuner serve` at start: a blank or missing TUNER_API_TOKEN is one line on
stderr saying the write routes are closed; a set one says nothing; the app gets the settings.

SQLite store files: a store SQLite opens read-only is read, and a command that writes to it
stops with one line (tuner.cli.guard); `tuner db backup` makes one consistent file while a
writer holds commits in `-wal`, where a copy of `tuner.db` alone misses them."""

from __future__ import annotations

import os
import shutil
import socket
import sqlite3
import sys
from pathlib import Path

import pytest
import uvicorn

from db.connection import normalized_url, open_store
from tests.cli.common import invoke, ok, query
from tests.storefill import DEFAULT, fill
from tuner.cli.app import app
from tuner.cli.guard import run_guarded

IMPORTED = "N=256,K=128,device_name=NVIDIA_L20,dtype=fp8_w8a8,block_shape=[128,128].json"
CONFIG = (
    '{"1": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, '
    '"GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 3}}'
)
# The commands that read a store and never create one, with the arguments they need.
READERS = {
    "status": "status",
    "winners": "winners --device L20",
    "export": "export --device L20 --out out",
    "mounts": "mounts --device L20",
    "serve": "serve --port 8123",
    "verify": "verify --device interpreter --model tiny",
    "compare": "compare --device interpreter --model tiny",
    "publish": "publish --device L20",
    "worker": "worker --device interpreter",
}
# The commands that create a store that does not exist yet.
WRITERS = {
    "sweep": "sweep --device interpreter --model tiny",
    "sweep --dry-run": "sweep --device interpreter --model tiny --dry-run",
    "sweep --no-run": "sweep --device interpreter --model tiny --no-run",
    "import": f"import {IMPORTED} --device L20",
    "db upgrade": "db upgrade",
}
EVERY = READERS | WRITERS
PSYCOPG = 'pip install -e ".[postgres]" (or pip install "psycopg[binary]")'
FORMS = (
    "use sqlite:///PATH for a SQLite file (sqlite:////abs/path for an absolute one) or "
    "postgresql://USER@HOST/DB for PostgreSQL"
)


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working folder holding only the file `tuner import` reads; uvicorn never
    starts (a `tuner serve` that got that far exits 0, which the tests refuse)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TUNER_DB_URL", raising=False)
    monkeypatch.setattr(uvicorn, "run", lambda *args, **kwargs: None)
    (tmp_path / IMPORTED).write_text(CONFIG)
    return tmp_path


def refused(command: str, url: str, folder: Path) -> list[str]:
    """stderr's lines of a command that must exit 2; the folder holds what it held before."""
    result = invoke(*command.split(), "--db", url, code=2)
    assert "Traceback" not in result.output
    assert sorted(os.listdir(folder)) == [IMPORTED]
    return result.stderr.splitlines()


@pytest.mark.parametrize("command", sorted(EVERY))
def test_a_server_that_does_not_answer_is_one_line(folder, command):
    pytest.importorskip("psycopg")
    with socket.socket() as probe:  # a port nothing listens on: bound, then closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # postgres:// opens as postgresql+psycopg://, as every spelling does
    assert refused(EVERY[command], f"postgres://tuner@127.0.0.1:{port}/tuner", folder) == [
        f"error: cannot open the store postgresql+psycopg://tuner@127.0.0.1:{port}/"
        f'tuner (connection to server at "127.0.0.1", port {port} failed: Connection '
        "refused): fix or start it, or point --db (or TUNER_DB_URL) at another"
    ]


@pytest.mark.parametrize(
    ("url", "line"),
    [
        (
            "postgresql://tuner@127.0.0.1:9/tuner",
            "postgresql+psycopg://tuner@127.0.0.1:9/tuner needs the psycopg driver, which is "
            f"not installed: {PSYCOPG}",
        ),
        (
            "mysql://tuner@127.0.0.1/tuner",
            "mysql://tuner@127.0.0.1/tuner: the store is SQLite or PostgreSQL, not 'mysql': "
            + FORMS,
        ),
    ],
)
@pytest.mark.parametrize("command", sorted(EVERY))
def test_a_store_that_cannot_be_opened_here_is_one_line(folder, monkeypatch, command, url, line):
    monkeypatch.setitem(sys.modules, "psycopg", None)  # `import psycopg` raises ImportError
    assert refused(EVERY[command], url, folder) == [f"error: --db (or TUNER_DB_URL) {line}"]


@pytest.mark.parametrize("url", ["sqlite:///tuner.db", "sqlite:///nonexistent/tuner.db"])
@pytest.mark.parametrize("command", sorted(READERS))
def test_reading_commands_refuse_a_missing_sqlite_file(folder, command, url):
    serve = "; or --create-store to serve an empty one" if command == "serve" else ""
    assert refused(READERS[command], url, folder) == [
        f"error: no store at {url}: run `tuner sweep` first, or point --db (or TUNER_DB_URL) "
        f"at the store{serve}"
    ]


def test_a_dry_run_creates_nothing_serve_creates_a_store_when_asked(folder, no_visible_gpu):
    # A GPU's plan: the interpreter's would time a calibration trial first.
    dry_run = "sweep --device L20 --model tiny --dry-run --m 1,16 --db sqlite:///new/tuner.db"
    result = ok(*dry_run.split())
    assert result.stdout.splitlines()[0] == "plan: NVIDIA_L20, tiny TP 1, guided"
    assert sorted(os.listdir(folder)) == [IMPORTED]
    # A store that exists opens without a word: test_serve_says_when_writes_are_closed[tok].
    env = {"TUNER_API_TOKEN": "tok"}
    created = ok(*"serve --port 8123 --create-store --db sqlite:///data/tuner.db".split(), env=env)
    assert created.stderr == ""
    tables = {name for (name,) in query(folder / "data/tuner.db", "SELECT name FROM sqlite_master")}
    assert {"alembic_version", "sweeps", "trials"} <= tables


@pytest.mark.parametrize(
    ("given", "opened"),
    [
        ("postgres://u:p%40ss@db:5432/tuner", "postgresql+psycopg://u:p%40ss@db:5432/tuner"),
        ("postgresql://u@db/tuner", "postgresql+psycopg://u@db/tuner"),
        ("postgresql+psycopg2://u@db/tuner", "postgresql+psycopg2://u@db/tuner"),
        ("sqlite:///x.db", "sqlite:///x.db"),
    ],
)
def test_postgres_urls_open_with_psycopg_and_others_as_given(given: str, opened: str) -> None:
    assert normalized_url(given) == opened


CLOSED = "note: TUNER_API_TOKEN is unset or blank: write routes answer 403"


@pytest.mark.parametrize(
    ("token", "lines"), [(None, [CLOSED]), ("", [CLOSED]), ("  ", [CLOSED]), ("tok", [])]
)
def test_serve_says_when_writes_are_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, token: str | None, lines: list[str]
) -> None:
    served = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: served.append((app, kw)))
    monkeypatch.delenv("TUNER_API_TOKEN", raising=False)
    env = {} if token is None else {"TUNER_API_TOKEN": token}
    monkeypatch.setenv("TUNER_MAX_BODY_BYTES", "5000")
    open_store(f"sqlite:///{tmp_path / 't.db'}").dispose()  # serve refuses a missing store
    result = ok("serve", "--db", f"sqlite:///{tmp_path / 't.db'}", "--port", "8123", env=env)
    assert result.stderr.splitlines() == lines
    [(service, options)] = served
    assert options == {"host": "127.0.0.1", "port": 8123}
    settings = service.state.settings
    assert settings.max_body_bytes == 5000
    assert (settings.api_token is None) == (token != "tok")


def test_a_store_that_cannot_be_written_is_read_and_a_write_is_one_line(
    tmp_path, monkeypatch, capsys
):
    path = tmp_path / "tuner.db"
    fill(f"sqlite:///{path}", {(256, 384, 1): [(DEFAULT, True, "ok", 10.0)]})
    expected = ok("winners", "--device", "L20", "--db", f"sqlite:///{path}").stdout
    read_only = f"sqlite:///file:{path}?mode=ro&uri=true"  # SQLite's own read-only opening
    assert ok("winners", "--device", "L20", "--db", read_only).stdout == expected
    monkeypatch.setattr(
        sys, "argv", ["tuner", "publish", "--device", "L20", "--allow-partial", "--db", read_only]
    )
    with pytest.raises(SystemExit) as exited:
        run_guarded(app)  # what the console script runs: a traceback would escape it
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: the store failed (OperationalError: attempt to write a readonly database); "
        "fix the store and run the same command"
    ]


def test_backup_has_the_commits_still_in_the_wal(tmp_path):
    path, backup = tmp_path / "tuner.db", tmp_path / "backup.db"
    fill(f"sqlite:///{path}", {(256, 384, 1): [(DEFAULT, True, "ok", 10.0)]})
    args = ["db", "backup", str(backup), "--db", f"sqlite:///{path}"]
    writer = sqlite3.connect(path)
    try:
        writer.execute("PRAGMA wal_autocheckpoint=0")  # the commit stays in tuner.db-wal
        writer.execute("UPDATE trials SET latency_us = 7.5")
        writer.commit()
        shutil.copy(path, tmp_path / "copy.db")
        result = invoke(*args)
    finally:
        writer.close()
    assert result.stdout.startswith(f"backed up {path} to {backup} ("), result.output
    assert query(backup, "SELECT latency_us FROM trials") == [(7.5,)]
    assert query(backup, "PRAGMA integrity_check") == [("ok",)]
    # tuner.db alone: the commit is lost
    assert query(tmp_path / "copy.db", "SELECT latency_us FROM trials") == [(10.0,)]
    again = invoke(*args)
    assert (again.exit_code, again.stderr) == (2, f"error: {backup} exists: name a new file\n")
