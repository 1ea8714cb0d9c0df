"""`tuner db upgrade` and `tuner db backup`: migrate the store's schema, copy a SQLite store."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Annotated

import typer

from db.repo import connect, sqlite_path, upgrade
from tuner.cli.errors import fail
from tuner.cli.options import DbOpt
from tuner.cli.output import plain
from tuner.cli.store import masked, no_store_line, open_failed, store_url


def db_upgrade(db: DbOpt = None) -> None:
    """Upgrade the store's schema to this version of the tuner (Alembic); a new store is
    created at it."""
    url = store_url(db)
    store = connect(url)
    try:
        upgrade(store)
    except Exception as exc:  # noqa: BLE001 - an unreachable server, a bad file: one line
        raise open_failed(exc, url) from None
    finally:
        store.dispose()
    plain(f"store {masked(url)} is at the current schema")


def db_backup(
    out: Annotated[Path, typer.Argument(help="The backup file to write (a new SQLite file).")],
    db: DbOpt = None,
) -> None:
    """Copy a SQLite store into one consistent file while sweeps keep writing to it.

    Uses SQLite's online backup (Python's `sqlite3.Connection.backup`), which includes the
    commits still in `tuner.db-wal`: copying `tuner.db` alone is not a backup.
    """
    url = store_url(db)
    path = sqlite_path(url)
    if path is None:
        raise fail(f"store {masked(url)} is not a SQLite file: back up PostgreSQL with pg_dump")
    if not path.exists():
        raise fail(no_store_line(url))
    if out.exists():
        raise fail(f"{out} exists: name a new file")
    try:
        source = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
        with closing(source), closing(sqlite3.connect(out)) as target:
            source.backup(target)
    except sqlite3.Error as exc:
        out.unlink(missing_ok=True)
        raise fail(f"backup of {path} to {out} failed: {exc}") from None
    plain(f"backed up {path} to {out} ({out.stat().st_size} bytes)")
