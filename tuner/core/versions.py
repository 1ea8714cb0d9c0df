"""Triton's major.minor of a version string: what the stored trials' provenance is compared by."""

from __future__ import annotations

import re

# <major>.<minor> at the start of a version, not followed by another digit: "3.6.0", "3.6.1+git",
# "3.6" (PEP 440 and Triton's own `triton.__version__`).
TRITON_MINOR_RE = re.compile(r"(\d+)\.(\d+)(?!\d)")


def minor_of(version: str) -> tuple[int, int] | None:
    """(major, minor) of a version string; None when it does not start with one.

    Args:
        version: e.g. "3.6.0", "3.6.1+git3f2a", " 3.6".

    Returns:
        e.g. (3, 6).
    """
    found = TRITON_MINOR_RE.match(version.strip()) if isinstance(version, str) else None
    return (int(found[1]), int(found[2])) if found else None


def triton_minor(version: str) -> str:
    """Triton's major.minor of a version string.

    Args:
        version: e.g. "3.6.0", "3.6.1+git3f2a", "3.6".

    Returns:
        e.g. "3.6" (leading zeros dropped).

    Raises:
        ValueError: the string does not start with <major>.<minor>.
    """
    found = minor_of(version)
    if found is None:
        raise ValueError(f"{version!r} is not a version such as 3.6.0")
    return f"{found[0]}.{found[1]}"
