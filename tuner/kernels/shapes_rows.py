"""Rows of integers as a model's shapes file lists them for a kernel family (e.g. `shapes =
[[N, K], ...]`, `moe = [[E, N, K, top_k], ...]` in a `[tp.<size>]` table): the checks every
family's parser shares (`FamilyShapes.parse_shapes`). Pure; errors are one line naming `where`.
"""

from __future__ import annotations

from collections.abc import Sequence

MAX_DIM = 999_999_999  # the largest N or K a config file name can carry (tuner.files.format)


def positive(value: object, where: str, limit: int) -> int:
    """`value` as a positive integer no larger than `limit`.

    Args:
        value: a parsed TOML value.
        where: what the value is, e.g. "shapes/tiny.toml, TP 1: N".
        limit: the largest value allowed.

    Raises:
        ValueError: not an integer (booleans included), above `limit`, or below 1.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{where} = {value!r:.40} is not an integer")
    if value > limit:  # not printed: a huge integer may not even convert to text
        raise ValueError(f"{where} is larger than {limit}")
    if value < 1:
        raise ValueError(f"{where} = {value} is not positive")
    return value


def int_rows(
    rows: object,
    where: str,
    *,
    names: Sequence[str],
    not_a_list: str,
    row_label: str,
    value_label: str = "",
) -> list[tuple[int, ...]]:
    """Check a list of rows of positive integers, one per name.

    Args:
        rows: the parsed TOML value of the family's key.
        where: the file and TP table, e.g. "shapes/tiny.toml, TP 1".
        names: the row's dimensions, e.g. ("N", "K").
        not_a_list: the message (after `where: `) when `rows` is not a list.
        row_label: how a row is named in the message of a malformed one, e.g. "shape".
        value_label: a word before each dimension's name in value messages (e.g. "moe").

    Returns:
        The rows as tuples of ints, in order.

    Raises:
        ValueError: not a list, a row that is not a list of len(names), or a bad value.
    """
    if not isinstance(rows, list):
        raise ValueError(f"{where}: {not_a_list}")
    row_text = f"[{', '.join(names)}]"
    parsed = []
    prefix = f"{value_label} " if value_label else ""
    for row in rows:
        if not isinstance(row, list) or len(row) != len(names):
            raise ValueError(f"{where}: {row_label} {row!r:.60} is not {row_text}")
        parsed.append(
            tuple(
                positive(value, f"{where}: {prefix}{name}", MAX_DIM)
                for value, name in zip(row, names, strict=True)
            )
        )
    return parsed
