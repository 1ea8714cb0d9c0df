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
from sqlalchemy import Connection, Engine, create_engine, event, inspect, make_url
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"

# The driver of a PostgreSQL URL that names none: psycopg 3, what the `postgres` extra installs
# (SQLAlchemy's own default for `postgresql://` is psycopg2, and it knows no `postgres://`,
# the spelling of libpq, Heroku and many PaaS variables).
PSYCOPG_DRIVERNAME = "postgresql+psycopg"
_POSTGRES_WITHOUT_DRIVER = ("postgres", "postgresql")

# How long open_store waits for another process that is creating the same empty store.
_CREATE_WAIT_S = 30.0


class SchemaError(RuntimeError):
    """The store's schema revision is not the one this version of the tuner expects."""


def default_db_url() -> str:
    """The store URL used when none is given.

    Returns:
        `$TUNER_DB_URL` when set and non-empty, else `sqlite:///tuner.db` (a file in the
        current working directory).
    """
    return os.environ.get("TUNER_DB_URL") or "sqlite:///tuner.db"


def normalized_url(url: str) -> str:
    """The store URL as the tuner opens it: `postgres://` and `postgresql://` name psycopg 3
    (`postgresql+psycopg://`); every other URL is returned unchanged.

    Args:
        url: a SQLAlchemy URL, e.g. `postgres://tuner:pw@db:5432/tuner`.

    Returns:
        e.g. `postgresql+psycopg://tuner:pw@db:5432/tuner` (password kept).

    Raises:
        sqlalchemy.exc.ArgumentError: `url` is not a SQLAlchemy URL.
    """
    parsed = make_url(url)
    if parsed.drivername not in _POSTGRES_WITHOUT_DRIVER:
        return url
    return parsed.set(drivername=PSYCOPG_DRIVERNAME).render_as_string(hide_password=False)


def _set_sqlite_pragmas(dbapi_connection: Any, _connection_record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        # busy_timeout first, so that switching to WAL waits for other writers. Switching a file
        # to WAL needs an exclusive lock, and SQLite answers "database is locked" at once,
        # without its busy handler, while another connection holds one (two processes opening
        # a new store together): retry for up to the busy timeout. An in-memory database stays
        # in "memory" mode; that answer is final too.
        cursor.execute("PRAGMA busy_timeout=30000")
        deadline = time.monotonic() + 30.0
        while True:
            try:
                cursor.execute("PRAGMA journal_mode=WAL")
                break
            except sqlite3.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        # No fsync per commit (only at checkpoints): a worker commits once per trial, and an
        # fsync cost it 1-2 ms of wall time, GPU time lost. In WAL mode this stays consistent
        # and loses nothing when a process is killed; a power loss or OS crash may roll back
        # the last commits, which a resumed sweep measures again. (SQLite's documentation of
        # PRAGMA synchronous, https://www.sqlite.org/pragma.html#pragma_synchronous.)
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
    finally:
        cursor.close()


def _set_read_only_pragmas(dbapi_connection: Any, _connection_record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:  # nothing that writes: no journal mode switch, no schema
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA query_only=ON")
    finally:
        cursor.close()


def read_only_url(path: str | Path) -> str | None:
    """The URL that opens an existing SQLite store for reading only, when this process cannot
    write the file or its folder; None when it can (open it as usual).

    A file that is not writable is opened `mode=ro`; a folder that is not writable (SQLite
    could not create the `-wal` and `-shm` files there) `immutable=1`, which is safe only while
    no `-wal` file holds commits: with one, `mode=ro` (SQLite reads a WAL store read-only when
    its `-wal` and `-shm` exist; https://www.sqlite.org/wal.html#readonly).

    Args:
        path: the store's file; it must exist.

    Returns:
        A `sqlite:///file:...?mode=ro&uri=true` (or `immutable=1`) URL, or None.
    """
    file = Path(path).expanduser().resolve()
    folder_ok = os.access(file.parent, os.W_OK)
    if os.access(file, os.W_OK) and folder_ok:
        return None
    wal = file.with_name(file.name + "-wal")
    has_wal = wal.exists() and wal.stat().st_size > 0
    mode = "immutable=1" if not folder_ok and not has_wal else "mode=ro"
    return f"sqlite:///file:{file}?{mode}&uri=true"


def is_read_only_url(url: str) -> bool:
    """Whether a SQLite URL opens its file read-only (`mode=ro` or `immutable=1`)."""
    parsed = make_url(url)
    query = parsed.query
    return parsed.get_backend_name() == "sqlite" and (
        query.get("mode") == "ro" or query.get("immutable") == "1"
    )


def connect(url: str, *, pool_size: int | None = None, pool_timeout: float | None = None) -> Engine:
    """Connect to the store at a URL: a SQLAlchemy Engine with its connection pool.

    SQLite files get WAL journaling with synchronous=NORMAL (no fsync per commit), a 30 s
    busy timeout and foreign keys on every connection, and the folder of the file is created.
    Every pool checks a connection before handing it out (`pool_pre_ping`), so a connection
    left stale by a server restart or failover is replaced instead of failing the first
    statement of a trial or a request. `postgres://` and `postgresql://` open with psycopg 3
    (`normalized_url`); any other SQLAlchemy URL (for example
    `postgresql+psycopg://user:pw@host/db`) is passed through unchanged.

    Args:
        url: a SQLAlchemy URL.
        pool_size: connections kept (and the most open: no overflow); None for SQLAlchemy's
            default (5, overflow 10). Ignored for in-memory SQLite.
        pool_timeout: seconds to wait for a free connection before
            `sqlalchemy.exc.TimeoutError`; None for SQLAlchemy's 30.

    Returns:
        The store's Engine; nothing is connected or created in the database yet.
    """
    url = normalized_url(url)
    parsed = make_url(url)
    database = parsed.database or ""
    in_memory = parsed.get_backend_name() == "sqlite" and (
        database in ("", ":memory:") or database.startswith("file:")
    )
    options: dict[str, Any] = {"pool_pre_ping": True}
    if pool_size is not None and not in_memory:
        options |= {"pool_size": pool_size, "max_overflow": 0}
    if pool_timeout is not None and not in_memory:
        options["pool_timeout"] = pool_timeout
    store = create_engine(parsed, **options)
    if is_read_only_url(url):
        event.listen(store, "connect", _set_read_only_pragmas)
    elif parsed.get_backend_name() == "sqlite":
        if database and database != ":memory:" and not database.startswith("file:"):
            Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        event.listen(store, "connect", _set_sqlite_pragmas)
    return store


def _alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR).replace("%", "%%"))
    return config


def head_revision() -> str:
    """The schema revision this version of the tuner expects.

    Returns:
        The Alembic head revision id of the migrations shipped in `db/migrations`.
    """
    head = ScriptDirectory.from_config(_alembic_config()).get_current_head()
    if head is None:
        raise RuntimeError(f"no migrations found in {MIGRATIONS_DIR}")
    return head


def _revision_of(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


def current_revision(store: Engine) -> str | None:
    """The schema revision the store is at.

    Args:
        store: the store (its Engine).

    Returns:
        The revision id in `alembic_version`, or None for a store never migrated.
    """
    with store.connect() as connection:
        return _revision_of(connection)


def upgrade(store: Engine, revision: str = "head") -> None:
    """Migrate the store's schema with Alembic (what `tuner db upgrade` runs).

    Args:
        store: the store (its Engine).
        revision: the target revision id; "head" is the newest shipped.
    """
    config = _alembic_config()
    with store.begin() as connection:
        if connection.dialect.name == "sqlite":
            # pysqlite runs DDL outside any transaction, so other processes would see a half
            # made schema (tables, no revision yet). One write transaction makes the whole
            # upgrade appear at once; a second process opening the same new store waits for it.
            connection.exec_driver_sql("BEGIN IMMEDIATE")
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def dialect_insert(session: Session, entity: type[Any]) -> Any:
    """The dialect's INSERT for the session's store, the one that has `on_conflict_do_nothing`.

    Args:
        session: the open session.
        entity: the mapped table class to insert into.

    Returns:
        `sqlalchemy.dialects.sqlite.insert(entity)` or its PostgreSQL twin.

    Raises:
        NotImplementedError: the store is neither SQLite nor PostgreSQL.
    """
    dialect = session.get_bind().dialect.name
    module = {"sqlite": sqlite, "postgresql": postgresql}.get(dialect)
    if module is None:
        raise NotImplementedError(
            f"store backend {dialect!r} is not supported: use SQLite or PostgreSQL"
        )
    return module.insert(entity)


def _masked(store: Engine) -> str:
    return store.url.render_as_string(hide_password=True)


def _schema_error(store: Engine, revision: str | None, head: str) -> SchemaError:
    return SchemaError(
        f"store {_masked(store)} is at schema revision {revision or 'none'}, "
        f"this tuner expects {head}: run `tuner db upgrade`"
    )


def _create_schema(store: Engine, head: str) -> None:
    try:
        upgrade(store)
    except DBAPIError:
        # Another process may be creating the same empty store: wait for it to finish.
        deadline = time.monotonic() + _CREATE_WAIT_S
        while time.monotonic() < deadline:
            if current_revision(store) == head:
                return
            time.sleep(0.1)
        raise


def open_store(
    url: str | None = None, *, pool_size: int | None = None, pool_timeout: float | None = None
) -> Engine:
    """Open a store, creating its schema when the database is empty.

    Args:
        url: a SQLAlchemy URL; None means `default_db_url()`.
        pool_size, pool_timeout: the connection pool (see `connect`).

    Returns:
        The Engine of a store whose schema is at the head revision. A read-only SQLite URL
        (`read_only_url`) is only checked, never migrated or created.

    Raises:
        SchemaError: the database has tables but is not at the head revision (older, newer,
            or never stamped). The store is left unchanged.
    """
    store_url = url if url is not None else default_db_url()
    store = connect(store_url, pool_size=pool_size, pool_timeout=pool_timeout)
    try:
        head = head_revision()
        with store.connect() as connection:
            has_tables = bool(inspect(connection).get_table_names())
            revision = _revision_of(connection) if has_tables else None
        if not has_tables and is_read_only_url(store_url):
            raise SchemaError(f"store {_masked(store)} is empty and read-only: nothing to read")
        if not has_tables:
            _create_schema(store, head)
        elif revision != head:
            raise _schema_error(store, revision, head)
    except BaseException:
        store.dispose()
        raise
    return store


@contextmanager
def session_scope(store: Engine) -> Iterator[Session]:
    """One transaction: commit when the block succeeds, roll back when it raises.

    Args:
        store: the store (its Engine).

    Yields:
        A session whose objects stay readable after the commit (`expire_on_commit=False`).
    """
    factory = sessionmaker(store, expire_on_commit=False)
    with factory.begin() as session:
        yield session
