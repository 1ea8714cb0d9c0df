"""Connecting to the store (a SQLAlchemy Engine, called `store` here), its schema-version check,
the one transaction scope of the store, and store faults.

Store faults: which DBAPI errors are transient (retry on a fresh connection), a bounded retry
of one store step, and the one line that names a store that stays down or a full disk.
A transient error is one the store may stop giving by itself: a connection reset, a server
restart or failover (psycopg `OperationalError`, SQLAlchemy's `connection_invalidated`), a lock
or pool timeout, SQLite's "database is locked", "disk I/O error" and "database or disk is full"
(SQLITE_FULL: someone may free space). Anything else (a constraint, a bad statement, a schema
mismatch) is the caller's bug or data and is raised at once. A step that keeps failing past its
deadline raises `StoreUnavailable`, whose message is the one line a command prints.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, TypeVar

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import URL, Engine, create_engine, event, inspect, make_url
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
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


def sqlite_path(url: str | URL) -> Path | None:
    """The file of a SQLite store URL (a `file:` URI's too); None for another backend or an
    in-memory store."""
    parsed = make_url(url)
    database = parsed.database or ""
    if parsed.get_backend_name() != "sqlite" or database in ("", ":memory:"):
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


def _pragmas(dbapi_connection: Any) -> None:
    """busy_timeout first, so that switching to WAL waits for other writers. Switching a file
    to WAL needs an exclusive lock, and SQLite answers "database is locked" at once, without
    its busy handler, while another connection holds one (two processes opening a new store
    together): retry for up to the busy timeout (an in-memory database stays in "memory" mode;
    that answer is final too). No fsync per commit (synchronous=NORMAL, only at checkpoints): a
    worker commits once per trial, and an fsync cost it 1-2 ms of GPU time. In WAL mode this
    stays consistent and loses nothing when a process is killed; a power loss may roll back the
    last commits, which a resumed sweep measures again (https://www.sqlite.org/pragma.html#pragma_synchronous)."""
    execute = dbapi_connection.execute
    execute("PRAGMA busy_timeout=30000")
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
    is_sqlite, file = parsed.get_backend_name() == "sqlite", sqlite_path(parsed)
    options: dict[str, Any] = {"pool_pre_ping": True}
    if file is not None or not is_sqlite:  # pooled
        options |= {} if pool_size is None else {"pool_size": pool_size, "max_overflow": 0}
        options |= {} if pool_timeout is None else {"pool_timeout": pool_timeout}
    store = create_engine(parsed, **options)
    if file is not None:
        file.parent.mkdir(parents=True, exist_ok=True)
    if is_sqlite:
        event.listen(store, "connect", lambda dbapi, _record: _pragmas(dbapi))
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
    if has_tables and (revision := current_revision(store)) != head:
        raise SchemaError(
            f"store {name} is at schema revision {revision or 'none'}, "
            f"this tuner expects {head}: run `tuner db upgrade`"
        )
    if has_tables:
        return
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
    schema when the database is empty.

    Raises:
        SchemaError: the database has tables but is not at the head revision (older, newer,
            or never stamped). The store is left unchanged.
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


# --- store faults -----------------------------------------------------------------------------

T = TypeVar("T")

STORE_TIMEOUT_ENV = "TUNER_STORE_TIMEOUT_S"  # seconds a store may stay down (or full): 180
# Messages of sqlite3.OperationalError that a later try may not get (SQLite result codes
# SQLITE_BUSY, SQLITE_LOCKED, SQLITE_IOERR, SQLITE_FULL, SQLITE_CANTOPEN;
# https://www.sqlite.org/rescode.html).
_SQLITE_TRANSIENT: tuple[str, ...] = (
    "database is locked",
    "database table is locked",
    "disk i/o error",
)
_SQLITE_TRANSIENT += ("database or disk is full", "unable to open database file")
# psycopg's OperationalError and its subclasses (AdminShutdown, ConnectionTimeout, ...), lock
# timeouts, serialization failures and deadlocks, matched by class name anywhere in the MRO.
_PG_TRANSIENT = {"OperationalError", "InterfaceError", "LockNotAvailable", "SerializationFailure"}
_PG_TRANSIENT |= {"DeadlockDetected", "QueryCanceled"}
_DISK_FULL = ("database or disk is full", "no space left on device")


class StoreUnavailable(RuntimeError):
    """The store stayed unreachable, locked or full past the deadline; str() is one line."""


def store_timeout_s() -> float:
    """The retry deadline of a store step: `$TUNER_STORE_TIMEOUT_S` seconds, default 180.

    Raises:
        ValueError: the variable is set but not a positive number.
    """
    raw = os.environ.get(STORE_TIMEOUT_ENV, "").strip() or "180"
    with suppress(ValueError):
        if float(raw) > 0:
            return float(raw)
    raise ValueError(f"{STORE_TIMEOUT_ENV}={raw!r} is not a positive number of seconds")


def is_transient(exc: BaseException) -> bool:
    """Whether a store error may go away on its own (retry it), rather than be the caller's:
    a pool timeout, a DBAPI error whose connection SQLAlchemy invalidated, psycopg's errors
    above, SQLite's locked, I/O, full and cannot-open errors."""
    if isinstance(exc, PoolTimeoutError) or getattr(exc, "connection_invalidated", False):
        return True
    if not isinstance(exc, DBAPIError):
        return False
    if isinstance(exc.orig, sqlite3.Error):
        text = str(exc.orig).lower()
        return isinstance(exc.orig, sqlite3.OperationalError) and any(
            known in text for known in _SQLITE_TRANSIENT
        )
    return any(cls.__name__ in _PG_TRANSIENT for cls in type(exc.orig).__mro__)


def describe_store_error(exc: BaseException, url: str, *, waited_s: float | None = None) -> str:
    """One line that names what is wrong with the store and what to do, e.g. `disk full at
    /data: 0 bytes free (store sqlite:////data/tuner.db); free space and run the same command`
    or `store postgresql+psycopg://u:***@h/db unreachable for 180 s (OperationalError: ...);
    fix the store and run the same command` (the password hidden; `waited_s` None: no "for")."""
    name = masked(url)
    path = sqlite_path(url)
    orig = getattr(exc, "orig", None) or exc
    full = type(orig).__name__ == "DiskFull" or any(t in str(orig).lower() for t in _DISK_FULL)
    if full and path is not None:
        where = path.resolve().parent
        free = shutil.disk_usage(where).free if where.exists() else 0
        at = f"{where}: {free} bytes free (store {name})"
        return f"disk full at {at}; free space and run the same command"
    if full:
        return f"disk full at store {name}; free space on its server and run the same command"
    first = (str(orig).strip().splitlines() or [""])[0][:200]
    verb = "locked or unreadable" if path is not None else "unreachable"
    waited = f" for {waited_s:.0f} s" if waited_s is not None else ""
    return (
        f"store {name} {verb}{waited} ({type(orig).__name__}: {first}); "
        "fix the store and run the same command"
    )


def url_of(store: Engine) -> str:
    """The store's URL as a string with its password (for `retry_store`, which hides it)."""
    return store.url.render_as_string(hide_password=False)


class Outage:
    """Times a run of store failures across calls (the supervisor's loop, which retries at its
    next tick rather than in place): `failed` each time, `ok` once the store answers again.

    Args:
        url: the store's URL, for the message.
        deadline_s: seconds of failures in a row before `failed` raises; None for
            `store_timeout_s()`.
    """

    def __init__(self, url: str, deadline_s: float | None = None) -> None:
        self.url = url
        self.deadline_s = store_timeout_s() if deadline_s is None else deadline_s
        self.since: float | None = None

    def ok(self) -> None:
        """The store answered: the outage, if any, is over."""
        self.since = None

    def failed(self, exc: BaseException) -> bool:
        """Count one failure: True when it starts an outage (the caller may say so once).

        Raises:
            StoreUnavailable: the failures have lasted past the deadline, or `exc` is not
                transient (chained to `exc`).
        """
        first = self.since is None
        self.since = time.monotonic() if self.since is None else self.since
        waited = time.monotonic() - self.since
        if not is_transient(exc) or waited >= self.deadline_s:
            raise StoreUnavailable(describe_store_error(exc, self.url, waited_s=waited)) from exc
        return first


def retry_store(
    step: Callable[[], T],
    *,
    url: str,
    deadline_s: float | None = None,
) -> T:
    """Run one store step (a whole transaction), again after each transient error (pauses
    doubling from 0.1 s to 2 s), until it succeeds or the errors have lasted `deadline_s` (None:
    `store_timeout_s()`). The pool drops a connection whose error invalidated it (and
    `pool_pre_ping` a stale one), so a retry starts on a fresh one. `step` must be safe to run
    again (a failed transaction is rolled back; one whose commit was lost must be idempotent).

    Raises:
        StoreUnavailable: transient errors for longer than the deadline (chained to the last).
        Exception: any error that is not transient, at once.
    """
    outage, pause = Outage(url, deadline_s), 0.1
    outage.since = time.monotonic()
    while True:
        try:
            return step()
        except Exception as exc:
            if not is_transient(exc):
                raise
            outage.failed(exc)
            time.sleep(min(pause, max(0.0, outage.deadline_s - (time.monotonic() - outage.since))))
            pause = min(2.0, pause * 2)
