"""What every `tuner` command does with a store fault or Ctrl-C that reaches the top: one line
on stderr and an exit code, never a traceback."""

from __future__ import annotations

import sys
from collections.abc import Callable

from sqlalchemy.exc import DBAPIError, OperationalError

from db.repo import StoreUnavailable, is_transient
from tuner.run.supervisor import interrupted


def run_guarded(app: Callable[[], object]) -> None:
    """Run the Typer app (it reads sys.argv); a store that stayed unavailable (down, locked,
    full), a transient store error or the store's own (an OperationalError: e.g. a SQLite file
    that cannot be written) is one line and exit 2; Ctrl-C exits 130, SIGTERM 143
    (`tuner.run.supervisor.interrupted`). Any other store error (a constraint, a bad
    statement) is a bug: its traceback."""
    try:
        app()
    except StoreUnavailable as exc:
        _exit(f"error: {exc}", 2)
    except DBAPIError as exc:
        if not (is_transient(exc) or isinstance(exc, OperationalError)):
            raise
        orig = exc.orig if exc.orig is not None else exc
        first = (str(orig).strip().splitlines() or [""])[0][:200]
        _exit(
            f"error: the store failed ({type(orig).__name__}: {first}); "
            "fix the store and run the same command",
            2,
        )
    except KeyboardInterrupt as exc:
        _exit(*interrupted(exc))


def _exit(line: str, code: int) -> None:
    print(line, file=sys.stderr)
    sys.exit(code)
