"""Store faults: which DBAPI errors are transient (retry on a fresh connection), a bounded retry
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
import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from db.connection import masked, sqlite_path

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
    try:
        if float(raw) > 0:
            return float(raw)
    except ValueError:
        pass
    raise ValueError(f"{STORE_TIMEOUT_ENV}={raw!r} is not a positive number of seconds")


def is_transient(exc: BaseException) -> bool:
    """Whether a store error may go away on its own (retry it), rather than be the caller's:
    a pool timeout, a DBAPI error whose connection SQLAlchemy invalidated, psycopg's errors
    above, SQLite's locked, I/O, full and cannot-open errors."""
    if isinstance(exc, PoolTimeoutError) or getattr(exc, "connection_invalidated", False):
        return True
    if not isinstance(exc, DBAPIError):
        return False
    orig = exc.orig
    if (type(orig).__module__ or "").startswith("sqlite3"):
        text = str(orig).lower()
        return type(orig).__name__ == "OperationalError" and any(
            known in text for known in _SQLITE_TRANSIENT
        )
    return any(cls.__name__ in _PG_TRANSIENT for cls in type(orig).__mro__)


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
    on_retry: Callable[[BaseException], None] | None = None,
) -> T:
    """Run one store step (a whole transaction), again after each transient error (pauses
    doubling from 0.1 s to 2 s), until it succeeds or the errors have lasted `deadline_s` (None:
    `store_timeout_s()`). The pool drops a connection whose error invalidated it (and
    `pool_pre_ping` a stale one), so a retry starts on a fresh one. `step` must be safe to run
    again (a failed transaction is rolled back; one whose commit was lost must be idempotent);
    `on_retry` is called with each transient error.

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
            if on_retry is not None:
                on_retry(exc)
            time.sleep(min(pause, max(0.0, outage.deadline_s - (time.monotonic() - outage.since))))
            pause = min(2.0, pause * 2)
