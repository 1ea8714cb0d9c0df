"""`tuner status`: the sweeps table and one sweep's tasks, read back from rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.tabletext import table_rows
from tests.cli.test_cli_serving import PLAN, invoke, one_line_error
from tests.storefill import fill


def test_status(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tuner.cli import output

    monkeypatch.setattr(output.console, "_width", 220)  # one table row per line
    db = f"sqlite:///{tmp_path / 'tuner.db'}"
    from db.connection import open_store

    open_store(db).dispose()  # an empty store
    assert "no sweeps in the store yet" in invoke("status", "--db", db).stdout
    sweep_id = fill(db, PLAN, m_values=(1, 16, 32), fail_m=(32,))
    table = invoke("status", "--db", db)
    assert table.exit_code == 0
    assert table_rows(table.stdout) == [
        [str(sweep_id), "NVIDIA_L20", "test-model", "2", "grid", "2/3", "0", "0", "1", "4/4"]
    ]
    tasks = invoke("status", "--db", db, "--sweep", str(sweep_id))
    assert tasks.exit_code == 0
    rows = table_rows(tasks.stdout, first="576")
    assert [r[:9] for r in rows] == [
        ["576", "7168", "1", "done", "1", "2/2", "6.0", "10.0", "1.67x"],
        ["576", "7168", "16", "done", "1", "2/2", "10.0", "10.0", "1.00x"],
        ["576", "7168", "32", "failed", "1", "0/0", "-", "-", "-"],
    ]
    one_line_error(
        invoke("status", "--db", db, "--sweep", "99"), f"no sweep with id 99; sweeps: {sweep_id}"
    )
