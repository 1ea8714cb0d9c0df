"""The usage line of `--help`: a command's arguments as click writes them (CONFIG, [OUT],
FILES...), not as Typer 0.29 does (`{config}`, which reads as a template placeholder)."""

from __future__ import annotations


def _usage_display_name(self) -> str:
    """A TyperArgument's name on the usage line: its metavar as given, else its name in upper
    case; in brackets when optional; `...` after one that takes several values."""
    name = self.metavar or (self.name or "").upper()
    if not self.required:
        name = f"[{name}]"
    if self.nargs != 1:
        name += "..."
    return name


def plain_argument_usage() -> None:
    """Make every Typer argument's usage-line name click's (see the module docstring).

    Typer 0.29 (`typer.core.TyperArgument._usage_display_name`) wraps a required argument in
    braces; older Typer versions, which lack that method, already write click's form and are
    left alone. Idempotent.
    """
    from typer.core import TyperArgument

    if hasattr(TyperArgument, "_usage_display_name"):
        # Typer has no hook for an argument's usage name: its private method is replaced
        TyperArgument._usage_display_name = _usage_display_name  # type: ignore[method-assign]
