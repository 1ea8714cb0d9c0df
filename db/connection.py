"""Connecting to the store (a SQLAlchemy Engine, called `store` here), its schema-version check
and the one transaction scope of the store."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import URL, Engine, create_engine, event, inspect, make_url
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
_CREATE_WAIT_S = 30.0  # how long open_store waits for another process creating the same store


class SchemaError(RuntimeError):
    """The store's schema revision is not the one this version of the tuner expects."""


def default_db_url() -> str:
    """`$TUNER_DB_URL` when set and non-empty, else `sqlite:///tuner.db` (in the working folder)."""
    return os.environ.get("TUNER_DB_URL") or "sqlite:///tuner.db"


def masked(url: str | URL) -> str:
    """A store URL with its password shown as `***`, safe to print.

    Raises:
        sqlalchemy.exc.ArgumentError: `url` is not a SQLAlchemy URL.
    """
    return make_url(url).render_as_string(hide_password=True)


def sqlite_path(url: str | URL, *, uri: bool = True) -> Path | None:
    """The file of a SQLite store URL; None for another backend or an in-memory store, and
    without `uri` for a `file:` URI (a file named by path only)."""
    parsed = make_url(url)
    database = parsed.database or ""
    if parsed.get_backend_name() != "sqlite" or database in ("", ":memory:"):
        return None
    if database.startswith("file:") and not uri:
        return None
    return Path(database.removeprefix("file:").split("?", 1)[0]).expanduser()


def normalized_url(url: str) -> str:
    """The store URL as the tuner opens it: `postgres://` and `postgresql://` (libpq's and many
    PaaS variables' spelling; SQLAlchemy's own default driver would be psycopg2) name psycopg 3,
    what the `postgres` extra installs: `postgresql+psycopg://u:pw@h/db`, password kept. Any
    other URL is returned unchanged.

    Raises:
        sqlalchemy.exc.ArgumentError: `url` is not a SQLAlchemy URL.
    """
    parsed = make_url(url)
    if parsed.drivername not in ("postgres", "postgresql"):
        return url
    return parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)


def _pragmas(dbapi_connection: Any, read_only: bool) -> None:
    """busy_timeout first, so that switching to WAL waits for other writers. A read-only
    connection switches nothing. Switching a file to WAL needs an exclusive lock, and SQLite
    answers "database is locked" at once, without its busy handler, while another connection
    holds one (two processes opening a new store together): retry for up to the busy timeout
    (an in-memory database stays in "memory" mode; that answer is final too). No fsync per
    commit (synchronous=NORMAL, only at checkpoints): a worker commits once per trial, and an
    fsync cost it 1-2 ms of GPU time. In WAL mode this stays consistent and loses nothing when
    a process is killed; a power loss may roll back the last commits, which a resumed sweep
    measures again (https://www.sqlite.org/pragma.html#pragma_synchronous)."""
    execute = dbapi_connection.execute
    execute("PRAGMA busy_timeout=30000")
    if read_only:
        execute("PRAGMA query_only=ON")
        return
    deadline = time.monotonic() + 30.0
    while True:
        try:
            execute("PRAGMA journal_mode=WAL")
            break
        except sqlite3.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    execute("PRAGMA synchronous=NORMAL")
    execute("PRAGMA foreign_keys=ON")


def read_only_url(path: str | Path) -> str | None:
    """The URL that opens an existing SQLite store for reading only, when this process cannot
    write the file or its folder; None when it can (open it as usual).

    A file that is not writable is opened `mode=ro`; a folder that is not writable (SQLite
    could not create the `-wal` and `-shm` files there) `immutable=1`, which is safe only while
    no `-wal` file holds commits: with one, `mode=ro` (SQLite reads a WAL store read-only when
    its `-wal` and `-shm` exist; https://www.sqlite.org/wal.html#readonly).
    """
    file = Path(path).expanduser().resolve()
    folder_ok = os.access(file.parent, os.W_OK)
    if os.access(file, os.W_OK) and folder_ok:
        return None
    wal = file.with_name(file.name + "-wal")
    has_wal = wal.exists() and wal.stat().st_size > 0
    mode = "immutable=1" if not folder_ok and not has_wal else "mode=ro"
    return f"sqlite:///file:{file}?{mode}&uri=true"


def _is_read_only(parsed: URL) -> bool:
    query = parsed.query
    return parsed.get_backend_name() == "sqlite" and (
        query.get("mode") == "ro" or query.get("immutable") == "1"
    )


def connect(url: str, *, pool_size: int | None = None, pool_timeout: float | None = None) -> Engine:
    """Connect to the store at a URL (`normalized_url`): a SQLAlchemy Engine, nothing connected
    yet. SQLite files get the pragmas of `_pragmas` on every connection, and the folder of the
    file is created. Every pool checks a connection before handing it out (`pool_pre_ping`),
    so one left stale by a server restart or failover is replaced instead of failing a trial.

    Args:
        url: a SQLAlchemy URL.
        pool_size: connections kept (and the most open: no overflow); None for SQLAlchemy's
            default (5, overflow 10). Ignored for in-memory SQLite.
        pool_timeout: seconds to wait for a free connection before
            `sqlalchemy.exc.TimeoutError`; None for SQLAlchemy's 30. Ignored as pool_size.
    """
    parsed = make_url(normalized_url(url))
    is_sqlite, file = parsed.get_backend_name() == "sqlite", sqlite_path(parsed, uri=False)
    options: dict[str, Any] = {"pool_pre_ping": True}
    if file is not None or not is_sqlite:  # pooled
        options |= {} if pool_size is None else {"pool_size": pool_size, "max_overflow": 0}
        options |= {} if pool_timeout is None else {"pool_timeout": pool_timeout}
    store = create_engine(parsed, **options)
    if file is not None:
        file.parent.mkdir(parents=True, exist_ok=True)
    if is_sqlite:
        read_only = _is_read_only(parsed)
        event.listen(store, "connect", lambda dbapi, _record: _pragmas(dbapi, read_only))
    return store


def _alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR).replace("%", "%%"))
    return config


def head_revision() -> str:
    """The schema revision this tuner expects: the Alembic head of `db/migrations`."""
    return str(ScriptDirectory.from_config(_alembic_config()).get_current_head())


def current_revision(store: Engine) -> str | None:
    """The revision id in the store's `alembic_version`; None for a store never migrated."""
    with store.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def upgrade(store: Engine, revision: str = "head") -> None:
    """Migrate the store's schema with Alembic to `revision` (what `tuner db upgrade` runs).

    pysqlite runs DDL outside any transaction, so other processes would see a half made schema
    (tables, no revision yet): on SQLite one write transaction makes the whole upgrade appear at
    once, and a second process opening the same new store waits for it."""
    config = _alembic_config()
    with store.begin() as connection:
        if connection.dialect.name == "sqlite":
            connection.exec_driver_sql("BEGIN IMMEDIATE")
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def dialect_insert(session: Session, entity: type[Any]) -> Any:
    """The dialect's INSERT into `entity` (the one with `on_conflict_do_nothing`).

    Raises:
        KeyError: the store is neither SQLite nor PostgreSQL.
    """
    dialect = session.get_bind().dialect.name
    return {"sqlite": sqlite, "postgresql": postgresql}[dialect].insert(entity)


def _check_schema(store: Engine) -> None:
    """Create the schema of an empty store (waiting for another process creating it), or
    refuse one at another revision."""
    head, name = head_revision(), masked(store.url)
    with store.connect() as connection:
        has_tables = bool(inspect(connection).get_table_names())
    revision = current_revision(store) if has_tables else None
    if has_tables and revision != head:
        raise SchemaError(
            f"store {name} is at schema revision {revision or 'none'}, "
            f"this tuner expects {head}: run `tuner db upgrade`"
        )
    if has_tables:
        return
    if _is_read_only(store.url):
        raise SchemaError(f"store {name} is empty and read-only: nothing to read")
    try:
        upgrade(store)
    except DBAPIError:
        deadline = time.monotonic() + _CREATE_WAIT_S
        while time.monotonic() < deadline:
            if current_revision(store) == head:
                return
            time.sleep(0.1)
        raise


def open_store(
    url: str | None = None, *, pool_size: int | None = None, pool_timeout: float | None = None
) -> Engine:
    """Open a store (`url` None: `default_db_url()`; the pool as `connect`'s), creating its
    schema when the database is empty. A read-only SQLite URL (`read_only_url`) is only
    checked, never migrated or created.

    Raises:
        SchemaError: the database has tables but is not at the head revision (older, newer,
            or never stamped), or is empty and read-only. The store is left unchanged.
    """
    url = default_db_url() if url is None else url
    store = connect(url, pool_size=pool_size, pool_timeout=pool_timeout)
    try:
        _check_schema(store)
    except BaseException:
        store.dispose()
        raise
    return store


@contextmanager
def session_scope(store: Engine) -> Iterator[Session]:
    """One transaction: commit when the block succeeds, roll back when it raises; the session's
    objects stay readable after the commit (`expire_on_commit=False`)."""
    with sessionmaker(store, expire_on_commit=False).begin() as session:
        yield session
