"""The one way a command refuses: one line on stderr and an exit code (2 for bad input)."""

from __future__ import annotations

import typer


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print `error: {message}` on stderr; return the Exit to raise."""
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)
