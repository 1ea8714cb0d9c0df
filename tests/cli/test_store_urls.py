"""Every command that takes --db reads the store URL in one place (`tuner.cli.store`):
`postgres://` and `postgresql://` mean psycopg's `postgresql+psycopg://`; a missing driver, a
database other than SQLite or PostgreSQL, a server that does not answer and (for the commands
that only read, `tuner serve` among them) a SQLite file that does not exist are each one line on
stderr with the fix and exit 2, and nothing is created on disk. `sweep --dry-run` against a
server that does not answer is refused, not planned as if the store were empty.

`tuner serve` at start: a blank or missing TUNER_API_TOKEN is one line on
stderr saying the write routes are closed; a set one says nothing; the app gets the settings.

SQLite store files: `tuner winners` and `tuner status` read a store whose file, or whose
folder, this process cannot write (mode=ro / immutable=1), say so in one line and leave it
byte for byte unchanged; a command that writes refuses it in one line; `tuner db backup` makes
one consistent file while a writer holds commits in `-wal`, where a copy of `tuner.db` alone
misses them.

As root every file is writable to `os.access`, so the tests make `os.access` answer as for an
unprivileged user on top of the real chmod; SQLite's read-only opening is real either way."""

from __future__ import annotations

import gc
import hashlib
import os
import shutil
import socket
import sqlite3
import sys
from pathlib import Path

import pytest
import uvicorn

import db.connection
import tuner.cli.store
from db.connection import normalized_url, open_store
from tests.cli.common import invoke, ok, one_line_error, query
from tests.storefill import DEFAULT, FAST, fill

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
    assert created.stderr.splitlines() == ["note: created folder data for the store"]
    tables = {name for (name,) in query(folder / "data/tuner.db", "SELECT name FROM sqlite_master")}
    assert {"alembic_version", "sweeps", "trials"} <= tables
    assert "created folder" not in ok("status", "--db", "sqlite:///data/tuner.db").stderr


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


WAL_FILES = ("tuner.db-wal", "tuner.db-shm")


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "store" / "tuner.db"
    plan = {
        (256, 384, m): [(DEFAULT, True, "ok", 10.0), (FAST, False, "ok", 5.0)] for m in (1, 16, 32)
    }
    fill(f"sqlite:///{path}", plan)
    expected = ok("winners", "--device", "L20", "--db", f"sqlite:///{path}")
    # The in-process command's engine closes its connections when collected; the last one to
    # close checkpoints and removes -wal and -shm. Collect now, so that this does not happen
    # during the test and change the folder's listing under it.
    gc.collect()
    assert not path.with_name("tuner.db-wal").exists()
    return path, expected.stdout


def deny_writes(monkeypatch, *paths):
    real, denied = os.access, {str(p) for p in paths}

    def access(path, mode, **kwargs):
        return not (mode & os.W_OK and str(path) in denied) and real(path, mode, **kwargs)

    for module in (db.connection.os, tuner.cli.store.os):
        monkeypatch.setattr(module, "access", access)


def sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("what", ["file", "folder"])
def test_read_only_store_is_read_and_left_unchanged(store, monkeypatch, what):
    path, expected = store
    before = sha(path)
    listing = sorted(p.name for p in path.parent.iterdir() if p.name not in WAL_FILES)
    denied = path if what == "file" else path.parent
    denied.chmod(0o444 if what == "file" else 0o555)
    deny_writes(monkeypatch, denied.resolve())
    try:
        result = invoke("winners", "--device", "L20", "--db", f"sqlite:///{path}")
        status = invoke("status", "--db", f"sqlite:///{path}")
    finally:
        denied.chmod(0o644 if what == "file" else 0o755)
    assert (result.exit_code, result.stdout) == (0, expected), result.output
    label = "the file" if what == "file" else "its folder"
    assert result.stderr.splitlines() == [
        f"note: store {path} is read-only ({label} is not writable): opened for reading only"
    ]
    assert status.exit_code == 0, status.output
    assert "1/3" not in status.stdout and "3/3" in status.stdout
    assert sha(path) == before
    after = [p.name for p in path.parent.iterdir()]
    # In a writable folder SQLite reads a WAL store through its -wal and -shm, which it makes
    # there if they are missing (https://www.sqlite.org/wal.html#readonly); the WAL is empty.
    assert what == "file" or not set(after) & set(WAL_FILES)
    wal = path.with_name("tuner.db-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    assert sorted(n for n in after if n not in WAL_FILES) == listing


def test_a_command_that_writes_refuses_a_read_only_store_in_one_line(store, monkeypatch):
    path, _ = store
    deny_writes(monkeypatch, path.resolve())
    one_line_error(
        invoke("publish", "--device", "L20", "--db", f"sqlite:///{path}"),
        f"store {path} is read-only (the file is not writable) and this command writes to it: "
        "make it writable or copy it (`tuner db backup`)",
    )


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
