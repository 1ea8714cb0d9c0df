"""SQLite store files: `tuner winners` and `tuner status` read a store whose file, or whose
folder, this process cannot write (mode=ro / immutable=1), say so in one line and leave it
byte for byte unchanged; a command that writes refuses it in one line; `tuner db backup` makes
one consistent file while a writer holds commits in `-wal`, where a copy of `tuner.db` alone
misses them.

As root every file is writable to `os.access`, so the tests make `os.access` answer as for an
unprivileged user on top of the real chmod; SQLite's read-only opening is real either way.
"""

from __future__ import annotations

import gc
import hashlib
import os
import shutil
import sqlite3

import pytest

import db.connection
import tuner.cli.store
from tests.cli.common import invoke, ok, one_line_error, query
from tests.storefill import DEFAULT, FAST, fill

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
