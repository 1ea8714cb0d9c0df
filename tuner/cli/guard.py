"""What every `tuner` command does with a store fault or Ctrl-C that reaches the top: one line
on stderr and an exit code, never a traceback."""

from __future__ import annotations

import sys
from collections.abc import Callable

from db.repo import is_transient

# Exit code of a store that stayed unavailable (down, locked, full); an interrupt exits 130
# for Ctrl-C (128 + SIGINT), 143 for SIGTERM while workers run (tuner.run.interrupt).
EXIT_STORE_UNAVAILABLE = 2


def run_guarded(app: Callable[[], object]) -> None:
    """Run the Typer app; turn a store fault or Ctrl-C that escaped a command into one line.

    A store error that is not transient (a bad statement, a constraint) is a bug and keeps its
    traceback. Typer/Click already turn their own errors into lines.

    Args:
        app: the Typer app (called with no arguments: it reads sys.argv).
    """
    try:
        app()
    except Exception as exc:
        line = _store_fault_line(exc)
        if line is None:
            raise
        print(line, file=sys.stderr)
        sys.exit(EXIT_STORE_UNAVAILABLE)
    except KeyboardInterrupt as exc:  # Ctrl-C 130, SIGTERM 143 (tuner.run.interrupt)
        from tuner.run.interrupt import interrupted_exit

        code, what = interrupted_exit(exc)
        print(f"{what}; finished work is stored: run the same command to resume", file=sys.stderr)
        sys.exit(code)


def _store_fault_line(exc: Exception) -> str | None:
    """The one line for a store fault (`db.faults.StoreUnavailable`, or a transient
    `sqlalchemy.exc.DBAPIError`); None for anything else, a non-transient store error included.

    An instance of either class means its module was imported already, so both are looked up in
    sys.modules: `tuner --help` and the commands that never open a store do not pay for
    importing sqlalchemy here.
    """
    faults = sys.modules.get("db.faults")
    if faults is not None and isinstance(exc, faults.StoreUnavailable):
        return f"error: {exc}"
    sqlalchemy_exc = sys.modules.get("sqlalchemy.exc")
    if sqlalchemy_exc is None or not isinstance(exc, sqlalchemy_exc.DBAPIError):
        return None

    if not is_transient(exc):
        return None
    orig = exc.orig if exc.orig is not None else exc
    first = (str(orig).strip().splitlines() or [""])[0][:200]
    return f"error: the store failed ({type(orig).__name__}: {first}); run the same command again"
