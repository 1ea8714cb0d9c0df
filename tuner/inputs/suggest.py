"""Closest known names for a mistyped one (a model key, a device), for "did you mean" hints."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """A hint naming the known names closest to a mistyped one, in any case
    (`difflib.get_close_matches`), or "" when none is close.

    Args:
        name: what the user typed, e.g. "qwen3.8-27B" or "L2O".
        known: the names it should have been one of.

    Returns:
        e.g. " (did you mean 'qwen3.8-27b'?)", or "".
    """
    by_lower = {item.lower(): item for item in known}
    close = difflib.get_close_matches(name.strip().lower(), list(by_lower), n=3, cutoff=0.6)
    if not close:
        return ""
    return " (did you mean " + " or ".join(f"'{by_lower[item]}'" for item in close) + "?)"
