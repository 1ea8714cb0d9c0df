"""How a command that was interrupted exits: Ctrl-C with 130 (128 + SIGINT), SIGTERM with 143
(128 + SIGTERM, what a shell reports for a process SIGTERM ended). Standard library only, so
the CLI's guard can read it without importing the supervisor."""

from __future__ import annotations

import signal


class Terminated(KeyboardInterrupt):
    """SIGTERM reached the process while workers ran (`docker stop`, `kubectl delete pod`,
    systemd): handled as Ctrl-C, but the command exits 143 instead of Ctrl-C's 130."""

    exit_code = 128 + signal.SIGTERM
    what = "terminated (SIGTERM)"


def interrupted_exit(exc: KeyboardInterrupt) -> tuple[int, str]:
    """(exit code, the word for it) of an interrupt: 143 and "terminated (SIGTERM)" for
    `Terminated`, 130 and "interrupted" for Ctrl-C (128 + SIGINT)."""
    if isinstance(exc, Terminated):
        return exc.exit_code, exc.what
    return 128 + signal.SIGINT, "interrupted"
