"""Where a `tuner` command's output goes: the consoles (tables and lines on stdout, progress
bars on stderr), a line printed as it is, and a --out folder checked."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from tuner.cli.errors import fail

console = Console()
# Progress bars: on stderr, so stdout keeps only the tables and lines a script reads.
err_console = Console(stderr=True)


def plain(text: str, to: Console | None = None) -> None:
    """Print a line as it is (on `to`, stdout's console by default): no markup, no
    highlighting, wrapped only at the terminal's edge."""
    (to or console).print(text, soft_wrap=True, markup=False, highlight=False)


def out_folder(path: Path) -> Path:
    """--out of a command that fills a folder: refuse a path that is not one.

    Raises:
        typer.Exit: one line, exit 2, when the path exists and is not a folder.
    """
    if path.exists() and not path.is_dir():
        raise fail(f"--out {path} is a file, not a folder: name a folder (created if absent)")
    return path
