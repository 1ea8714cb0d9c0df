"""Tasks stored as failed because of the store are re-opened; others stay failed."""

from __future__ import annotations

import sqlite3

from db import repo
from db.connection import open_store, session_scope
from tests.storefill import DEFAULT, fill


def test_store_failures_are_reopened_and_config_failures_stay(tmp_path):
    path = tmp_path / "tuner.db"
    url = f"sqlite:///{path}"
    sweep_id = fill(
        url, {(256, 384, m): [(DEFAULT, True, "ok", 10.0)] for m in (1, 16, 32)}, fail_m=(16, 32)
    )
    with sqlite3.connect(path) as connection:
        connection.execute(
            "UPDATE tasks SET error = 'OperationalError: (psycopg."
            'OperationalError) AdminShutdown\' WHERE "M" = 16'
        )
        connection.execute("UPDATE tasks SET error = 'ValueError: bad' WHERE \"M\" = 32")
    engine = open_store(url)
    try:
        with session_scope(engine) as session:
            assert repo.reopen_store_failures(session, sweep_id=sweep_id) == 1
    finally:
        engine.dispose()
    with sqlite3.connect(path) as connection:
        states = connection.execute('SELECT "M", state, error FROM tasks ORDER BY "M"').fetchall()
    assert states == [(1, "done", None), (16, "pending", None), (32, "failed", "ValueError: bad")]
