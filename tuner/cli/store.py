"""Opening the store for every `tuner` command that takes --db: the URL read and checked in
one place (`store_url`), the store opened (`open_db`) or only read if it exists
(`existing_store`); each failure is one line with the fix and exit 2. Also what a command
looks up in it: the device --device names, a device's merged files."""

from __future__ import annotations

import os
from pathlib import Path

import typer
from sqlalchemy import inspect, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError

from db import repo
from db.repo import (
    SchemaError,
    connect,
    default_db_url,
    normalized_url,
    open_store,
    read_only_url,
    session_scope,
    sqlite_path,
)
from tuner.cli.errors import fail
from tuner.files.device import MergeError, device_files
from tuner.inputs.devices import store_device


def masked(url: str) -> str:
    """A store URL with its password replaced by `***`, safe to print."""

    return make_url(url).render_as_string(hide_password=True)


# What --db may be, for the lines that refuse it.
STORE_URL_FORMS = (
    "sqlite:///PATH for a SQLite file (sqlite:////abs/path for an absolute one) "
    "or postgresql://USER@HOST/DB for PostgreSQL"
)
PSYCOPG_INSTALL = 'pip install -e ".[postgres]" (or pip install "psycopg[binary]")'
_DB_NAMED = "--db (or TUNER_DB_URL)"


def sqlite_url_hint(text: str) -> str:
    """The `sqlite:///` URL a malformed store URL or a plain path probably meant, as the tail
    of an error line; "" when it is neither.

    A relative path gets three slashes (`tuner.db` -> `sqlite:///tuner.db`), an absolute one
    four (`/data/x.db` -> `sqlite:////data/x.db`: SQLAlchemy's `sqlite:///` is followed by the
    path, https://docs.sqlalchemy.org/en/20/dialects/sqlite.html#connect-strings), `~` is
    expanded. A `sqlite:` URL without a slash (`sqlite:data/x.db`) keeps the relative path it
    wrote; one with one or two (`sqlite:/x.db`, `sqlite://data/x.db`, where `data` reads as a
    host) gets both readings, the relative file in the current folder first.

    Args:
        text: the --db value as given.

    Returns:
        e.g. "; for a SQLite file use sqlite:////data/x.db".
    """

    def url_of(path: str) -> str:
        return (
            f"sqlite:///{Path(path).expanduser()}" if path.startswith("~") else f"sqlite:///{path}"
        )

    lower = text.lower()
    if lower.startswith("sqlite:"):
        rest = text[len("sqlite:") :]
        if rest.startswith("///"):
            return ""
        path = rest.lstrip("/")
        if not path:
            return ""
        if not rest.startswith("/"):  # sqlite:data/x.db
            return f"; for the file {path} use {url_of(path)}"
        # sqlite:/x.db or sqlite://x.db: most often sqlite:///x.db mistyped; or a file in /.
        return (
            f"; for the file {path} (relative) use {url_of(path)}, for /{path} {url_of('/' + path)}"
        )
    if "://" in text or not text.strip():
        return ""
    return f"; for a SQLite file use {url_of(text)}"


def store_url(db: str | None, *, driver: bool = True) -> str:
    """The store's URL: --db, else $TUNER_DB_URL, else sqlite:///tuner.db; checked, and
    `postgres://` / `postgresql://` turned into psycopg's (`db.repo.normalized_url`). Every
    command that takes --db reads it here (through `open_db` or `existing_store` where it
    opens the store).

    Args:
        db: --db, or None.
        driver: also check that the URL's driver is installed (False where the command never
            connects, e.g. `tuner db backup`, which only copies SQLite files).

    Raises:
        typer.Exit: one line, exit 2, when it is not a SQLAlchemy URL (a plain path or a
            malformed sqlite URL gets the sqlite:/// URL it probably meant), names a database
            other than SQLite or PostgreSQL or a driver SQLAlchemy does not know, or its driver
            is not installed (psycopg: the pip command that installs it).
    """

    url = db or default_db_url()
    try:
        url = normalized_url(url)
        parsed = make_url(url)
    except ArgumentError:
        raise fail(f"{_DB_NAMED} {url!r} is not a database URL{sqlite_url_hint(url)}") from None
    dialect = parsed.get_backend_name()
    if dialect == "sqlite" and (parsed.host or parsed.username or parsed.port):
        hint = sqlite_url_hint(url) or f": use {STORE_URL_FORMS}"
        raise fail(f"{_DB_NAMED} {masked(url)} is not a SQLite URL (it names a host){hint}")
    if dialect not in ("sqlite", "postgresql"):
        raise fail(
            f"{_DB_NAMED} {masked(url)}: the store is SQLite or PostgreSQL, not "
            f"{parsed.drivername!r}: use {STORE_URL_FORMS}"
        )
    if driver:
        _check_driver(url)
    return url


def _check_driver(url: str) -> None:
    """Refuse, in one line with the fix, a URL whose SQLAlchemy dialect or DBAPI driver this
    environment cannot load (what `create_engine` would raise as a traceback)."""

    parsed = make_url(url)
    try:
        dialect = parsed.get_dialect()
    except NoSuchModuleError:
        raise fail(
            f"{_DB_NAMED} {masked(url)}: SQLAlchemy knows no driver "
            f"{parsed.drivername!r}: use {STORE_URL_FORMS} (psycopg)"
        ) from None
    if getattr(dialect, "is_async", False):
        raise fail(
            f"{_DB_NAMED} {masked(url)}: {parsed.get_driver_name()} is an asyncio "
            "driver; the store needs a blocking one: use postgresql://... (psycopg)"
        )
    try:
        dialect.import_dbapi()
    except ImportError as exc:
        name = exc.name or parsed.get_driver_name()
        if parsed.get_driver_name() == "psycopg":
            fix = PSYCOPG_INSTALL
        else:
            fix = f"install {name}, or use postgresql://... with psycopg: {PSYCOPG_INSTALL}"
        raise fail(
            f"{_DB_NAMED} {masked(url)} needs the {name} driver, which is not installed: {fix}"
        ) from None


def sqlite_missing(url: str) -> bool:
    """Whether a SQLite store URL names a file that does not exist (False for other stores and
    in-memory SQLite)."""

    path = sqlite_path(url)
    return path is not None and not path.exists()


def no_store_line(url: str) -> str:
    """The line that refuses a SQLite store URL whose file does not exist."""
    return (
        f"no store at {masked(url)}: run `tuner sweep` first, or point --db (or "
        "TUNER_DB_URL) at the store"
    )


def open_failed(exc: BaseException, url: str) -> typer.Exit:
    """One line (exit 2) for a store that could not be opened: a server that does not answer
    or refuses the login, a SQLite file that cannot be opened; return the Exit to raise."""

    orig = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
    reason = (str(orig).strip().splitlines() or [""])[0].strip()
    reason = reason.removeprefix("connection failed: ")[:200] or type(orig).__name__
    if sqlite_path(url) is None and isinstance(exc, DBAPIError):
        return fail(
            f"cannot connect to the store {masked(url)} ({reason}): start its server, "
            f"or point {_DB_NAMED} at one that runs"
        )
    return fail(
        f"cannot open store {masked(url)} ({type(orig).__name__}: {reason}): fix the "
        f"store or point {_DB_NAMED} at another"
    )


def _note_new_folder(url: str) -> None:
    """Say so on stderr when opening a SQLite store will create its folder."""

    parsed = make_url(url)
    database = parsed.database or ""
    if (
        parsed.get_backend_name() == "sqlite"
        and database
        and database != ":memory:"
        and not database.startswith("file:")
    ):
        folder = Path(database).expanduser().parent
        if not folder.exists():
            typer.echo(f"note: created folder {folder} for the store", err=True)


def _read_only_or_refused(url: str, read_only: bool) -> str:
    """The URL to open: the read-only URL of a SQLite store this process cannot write (one
    note line), the URL itself otherwise; one error line where the command must write."""

    parsed = make_url(url)
    database = parsed.database or ""
    if (
        parsed.get_backend_name() != "sqlite"
        or database in ("", ":memory:")
        or database.startswith("file:")
        or not Path(database).expanduser().exists()
    ):
        return url
    ro_url = read_only_url(database)
    if ro_url is None:
        return url
    path = Path(database).expanduser()
    what = "its folder" if os.access(path, os.W_OK) else "the file"
    if not read_only:
        raise fail(
            f"store {path} is read-only ({what} is not writable) and this command "
            "writes to it: make it writable or copy it (`tuner db backup`)"
        )
    typer.echo(
        f"note: store {path} is read-only ({what} is not writable): opened for reading only",
        err=True,
    )
    return ro_url


def open_db(db: str | None, *, must_exist: bool = False, read_only: bool = False):
    """(url, SQLAlchemy Engine) of the store, its schema checked (and created for a new store).

    Args:
        db: --db, or None for $TUNER_DB_URL / sqlite:///tuner.db.
        must_exist: for commands that only read: refuse a SQLite file that does not exist (a
            mistyped --db would otherwise be created empty and read as "nothing yet").
        read_only: the command only reads: a SQLite file (or folder) this process cannot
            write is opened read-only (`db.repo.read_only_url`), said in one note line;
            without it such a store is refused in one line.

    Raises:
        typer.Exit: one line, exit 2, when the store cannot be opened.
    """

    url = store_url(db)
    if must_exist:
        if sqlite_missing(url):
            raise fail(no_store_line(url))
    else:
        _note_new_folder(url)
    url = _read_only_or_refused(url, read_only)
    try:
        return url, open_store(url)
    except SchemaError as exc:
        raise fail(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - an unreachable server, a bad file: one line
        raise open_failed(exc, url) from None


def existing_store(db: str | None):
    """(url, SQLAlchemy Engine) of the store for a command that reads it and must not create
    it (`tuner sweep --dry-run`); the Engine is None when there is no store yet: a SQLite file
    that does not exist, a server database without tables. A server that cannot be reached is
    refused, not read as empty.

    Raises:
        typer.Exit: one line, exit 2: a bad URL, a missing driver, a server that does not
            answer, a store at another schema revision.
    """

    url = store_url(db)
    if sqlite_missing(url):
        return url, None
    if make_url(url).get_backend_name() != "sqlite":
        store = connect(url)
        try:
            with store.connect() as connection:
                has_tables = bool(inspect(connection).get_table_names())
        except Exception as exc:  # noqa: BLE001 - unreachable, login refused: one line
            raise open_failed(exc, url) from None
        finally:
            store.dispose()
        if not has_tables:
            return url, None
    return open_db(url, must_exist=True, read_only=True)


def device_in_store(session, device: str) -> str:
    """The store's device key that `--device` names (`tuner.inputs.devices.store_device`); else
    one line naming them, exit 2."""

    try:
        return store_device(device, repo.known_device_names(session))
    except ValueError as exc:
        raise fail(str(exc)) from None


def stored_device(session, device: str, device_name: str) -> str:
    """`device_name`, the vLLM key that `--device` resolved to, if the store has trials or
    imports of it (`tuner.inputs.devices.store_device`); else one line naming the store's
    devices, exit 2."""

    try:
        return store_device(device, repo.known_device_names(session), device_name)
    except ValueError as exc:
        raise fail(str(exc)) from None


def store_files(
    store,
    device_name: str,
    *,
    out_dtype: str | None,
    allow_stale: bool,
    allow_partial: bool,
    engine_name: str = "vllm",
    hint: str = "",
    kernel: str = "auto",
):
    """A device's files from the store (`tuner.files.device.device_files`), for `tuner export`,
    `verify` and `mounts`; the note on stale trials left out goes to stderr.

    Args:
        store: the store's SQLAlchemy Engine (`tuner.cli.store.open_db`).
        device_name: vLLM's device key, present in the store.
        out_dtype: only sweeps with this output dtype; None for all.
        allow_stale: also trials of another kernel source or Triton major.minor.
        allow_partial: also files of shapes whose M grid is not fully tuned.
        engine_name: file-name spelling, "vllm" or "sglang".
        hint: appended to the error line when the winners cannot be merged.
        kernel: whose kernels' trials count: "auto", "vllm" or "builtin".

    Returns:
        `tuner.files.device.StoreFiles`.

    Raises:
        typer.Exit: the winners cannot be merged (one line, exit 2).
    """

    try:
        with session_scope(store) as session:
            read = device_files(
                session,
                device_name,
                out_dtype=out_dtype,
                allow_stale=allow_stale,
                allow_partial=allow_partial,
                engine=engine_name,
                kernel=kernel,
            )
    except MergeError as exc:
        raise fail(f"{exc}{hint}") from None
    note = read.view.scope.note(device_name)
    if note is not None:
        typer.echo(note, err=True)
    return read
