"""Opening the store for every `tuner` command that takes --db: the URL read and checked in
one place (`store_url`), the store opened (`open_db`) or only read if it exists
(`existing_store`); each failure is one line with the fix and exit 2. Also what a command
looks up in it: the device --device names, a device's merged files."""

from __future__ import annotations

from typing import Any

import typer
from sqlalchemy import Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError

from db.repo import (
    SchemaError,
    default_db_url,
    known_device_names,
    normalized_url,
    open_store,
    session_scope,
    sqlite_path,
)
from db.repo import masked as masked
from tuner.cli.errors import fail
from tuner.files.device import MergeError, StoreFiles, device_files
from tuner.inputs.devices import device_among

STORE_URL_FORMS = (
    "use sqlite:///PATH for a SQLite file (sqlite:////abs/path for an absolute one) "
    "or postgresql://USER@HOST/DB for PostgreSQL"
)
PSYCOPG_INSTALL = 'pip install -e ".[postgres]" (or pip install "psycopg[binary]")'
_DB = "--db (or TUNER_DB_URL)"


def store_url(db: str | None) -> str:
    """The store's URL: --db, else $TUNER_DB_URL, else sqlite:///tuner.db, with `postgres://`
    read as psycopg's (`db.connection.normalized_url`).

    Args:
        db: --db, or None.

    Raises:
        typer.Exit: one line, exit 2: not a URL, a SQLite URL naming a host, a database other
            than SQLite or PostgreSQL, a missing driver.
    """
    url = db or default_db_url()
    try:
        url = normalized_url(url)
        parsed = make_url(url)
    except ArgumentError:
        raise fail(f"{_DB} {url!r} is not a database URL: {STORE_URL_FORMS}") from None
    backend, name = parsed.get_backend_name(), masked(url)
    if backend == "sqlite" and (parsed.host or parsed.username or parsed.port):
        raise fail(f"{_DB} {name} is not a SQLite URL (it names a host): {STORE_URL_FORMS}")
    if backend not in ("sqlite", "postgresql"):
        raise fail(
            f"{_DB} {name}: the store is SQLite or PostgreSQL, not {parsed.drivername!r}: "
            f"{STORE_URL_FORMS}"
        )
    try:  # what `create_engine` would raise as a traceback
        parsed.get_dialect().import_dbapi()
    except (NoSuchModuleError, ImportError) as exc:
        missing = getattr(exc, "name", None) or parsed.get_driver_name()
        raise fail(
            f"{_DB} {name} needs the {missing} driver, which is not installed: {PSYCOPG_INSTALL}"
        ) from None
    return url


def sqlite_missing(url: str) -> bool:
    """Whether a SQLite store URL names a file that does not exist."""
    path = sqlite_path(url)
    return path is not None and not path.exists()


def no_store_line(url: str) -> str:
    """The line that refuses a SQLite store URL whose file does not exist."""
    return f"no store at {masked(url)}: run `tuner sweep` first, or point {_DB} at the store"


def open_failed(exc: BaseException, url: str) -> typer.Exit:
    """One line (exit 2) for a store that could not be opened: a server that does not answer
    or refuses the login, a SQLite file that cannot be opened; return the Exit to raise."""
    orig = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
    reason = (str(orig).strip().splitlines() or [""])[0].strip()
    reason = reason.removeprefix("connection failed: ")[:200] or type(orig).__name__
    return fail(
        f"cannot open the store {masked(url)} ({reason}): fix or start it, "
        f"or point {_DB} at another"
    )


def open_db(db: str | None, *, must_exist: bool = False) -> tuple[str, Engine]:
    """(url, Engine) of the store, its schema checked (and created for a new store).

    Args:
        db: --db, or None for $TUNER_DB_URL / sqlite:///tuner.db.
        must_exist: the command only reads: refuse a SQLite file that does not exist.

    Raises:
        typer.Exit: one line, exit 2, when the store cannot be opened.
    """
    url = store_url(db)
    if must_exist and sqlite_missing(url):
        raise fail(no_store_line(url))
    try:
        return url, open_store(url)
    except SchemaError as exc:
        raise fail(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - an unreachable server, a bad file: one line
        raise open_failed(exc, url) from None


def existing_store(db: str | None) -> tuple[str, Engine | None]:
    """(url, Engine) of the store for a command that only reads it (`tuner sweep --dry-run`);
    Engine None when there is no SQLite file yet (none is created)."""
    url = store_url(db)
    if sqlite_missing(url):
        return url, None
    return open_db(url, must_exist=True)


def device_in_store(session, device: str) -> str:
    """The store's device key that `device` names (a `--device` argument, or the key it
    resolved to among the visible GPUs; `tuner.inputs.devices.device_among`); else one line
    naming the store's devices, exit 2."""
    try:
        return device_among(device, known_device_names(session))
    except ValueError as exc:
        raise fail(str(exc)) from None


def store_files(
    store: Engine, device_name: str, *, engine_name: str = "vllm", **scope: Any
) -> StoreFiles:
    """A device's files from the store (`tuner.files.device.device_files` with `scope`: its
    out_dtype, allow_stale, allow_partial and kernel; `engine_name` its engine), for `tuner
    export`, `verify` and `mounts`; the note on stale trials left out goes to stderr.

    Raises:
        typer.Exit: the winners cannot be merged (one line, exit 2).
    """
    try:
        with session_scope(store) as session:
            read = device_files(session, device_name, engine=engine_name, **scope)
    except MergeError as exc:
        raise fail(str(exc)) from None
    note = read.view.scope.note(device_name)
    if note is not None:
        typer.echo(note, err=True)
    return read
