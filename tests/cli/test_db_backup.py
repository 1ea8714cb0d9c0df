"""`tuner db backup`: one consistent file while a writer holds commits in `-wal`, where a copy
of `tuner.db` alone misses them."""

from __future__ import annotations

import shutil
import sqlite3

from typer.testing import CliRunner

from tests.storefill import DEFAULT, fill
from tuner.cli.app import app

runner = CliRunner()


def test_backup_has_the_commits_still_in_the_wal(tmp_path):
    path = tmp_path / "tuner.db"
    fill(f"sqlite:///{path}", {(256, 384, 1): [(DEFAULT, True, "ok", 10.0)]})
    writer = sqlite3.connect(path)
    try:
        writer.execute("PRAGMA wal_autocheckpoint=0")  # the commit stays in tuner.db-wal
        writer.execute("UPDATE trials SET latency_us = 7.5")
        writer.commit()
        shutil.copy(path, tmp_path / "copy.db")
        result = runner.invoke(
            app, ["db", "backup", str(tmp_path / "backup.db"), "--db", f"sqlite:///{path}"]
        )
    finally:
        writer.close()
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"backed up {path} to {tmp_path / 'backup.db'} (")
    with sqlite3.connect(tmp_path / "backup.db") as backup:
        assert backup.execute("SELECT latency_us FROM trials").fetchall() == [(7.5,)]
        assert backup.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    with sqlite3.connect(tmp_path / "copy.db") as copy:  # tuner.db alone: the commit is lost
        assert copy.execute("SELECT latency_us FROM trials").fetchall() == [(10.0,)]
    again = runner.invoke(
        app, ["db", "backup", str(tmp_path / "backup.db"), "--db", f"sqlite:///{path}"]
    )
    assert again.exit_code == 2
    assert again.stderr == f"error: {tmp_path / 'backup.db'} exists: name a new file\n"
