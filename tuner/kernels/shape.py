"""The shape a kernel family is tuned for: `Shape` (N, K, block shape and the family's other
dimensions), `FamilyShape` (a family's key with a shape: what tasks, merged files and report
sections are keyed by), `ShapeKeyed` (a record carrying such a key), how text names and sorts a
block shape, the store's columns of a shape's family and params, and the checks of the rows a
model's shapes file lists a family's shapes as (`int_rows`).

Standard library only: importable without torch or triton.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

_PARAM_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_]{0,31})=(\d{1,9})")


def _params_text(params: Sequence[tuple[str, int]]) -> str:
    return ",".join(f"{name}={value}" for name, value in params)


# How text (CLI tables, notes, the HTML report) names a shape without block scales: one weight
# scale for the whole weight and one activation scale per row (JSON and HTTP give null).
PER_TENSOR = "per-tensor"


def as_block_shape(block_shape: Sequence[int] | None) -> tuple[int, int] | None:
    """[group_n, group_k] as a pair of ints (the store and JSON give lists), or None for a
    shape without block scales (per-tensor; the store's repository and JSON give None/null).

    Raises:
        ValueError: neither None nor two values.
    """
    if block_shape is None:
        return None
    group_n, group_k = block_shape
    return (int(group_n), int(group_k))


def block_shape_text(block_shape: Sequence[int] | None) -> str:
    """How text names a block shape: "[128, 128]", or `PER_TENSOR` for None."""
    if block_shape is None:
        return PER_TENSOR
    return f"[{block_shape[0]}, {block_shape[1]}]"


def block_sort_key(block_shape: tuple[int, int] | None) -> tuple[int, ...]:
    """A block shape as it sorts: None (per-tensor) as (), before every pair."""
    return () if block_shape is None else block_shape


@functools.total_ordering
@dataclass(frozen=True)
class Shape:
    """What a family's GEMM is tuned for, apart from the batch size M.

    Attributes:
        N: rows of the weight [N, K] (per expert, for a fused-MoE family).
        K: the reduction dimension.
        block_shape: [group_n, group_k] of the weight scales, or None for a family without
            block scales (one scale per tensor; text names it `PER_TENSOR`). Always given:
            no family's block shape is assumed.
        params: the family's other dimensions as sorted (name, value) pairs, e.g.
            (("E", 128), ("top_k", 8)) for MoE experts; () for the dense GEMM.
    """

    N: int
    K: int
    block_shape: tuple[int, int] | None
    params: tuple[tuple[str, int], ...] = ()

    def __lt__(self, other: Shape) -> bool:
        """Order by N, K, block shape (None first, `block_sort_key`), params."""
        return self._order < other._order

    @property
    def _order(self) -> tuple[int, int, tuple[int, ...], tuple[tuple[str, int], ...]]:
        return (self.N, self.K, block_sort_key(self.block_shape), self.params)

    @property
    def params_text(self) -> str:
        """`params` as the store keeps them: `E=128,top_k=8`, or "" when there are none."""
        return _params_text(self.params)

    def block_pair(self, family: str) -> tuple[int, int]:
        """`block_shape` for a family whose kernel reads block scales (dense, fused MoE).

        Args:
            family: the family's name, for the message.

        Raises:
            ValueError: the shape has no block shape (per-tensor scales).
        """
        if self.block_shape is None:
            raise ValueError(f"{family} needs a block shape; N={self.N} K={self.K} has none")
        return self.block_shape

    def param(self, name: str) -> int:
        """One of `params` by name.

        Raises:
            KeyError: the shape has no such dimension.
        """
        return dict(self.params)[name]

    @classmethod
    def from_store(
        cls, N: int, K: int, block_shape: Sequence[int] | None, params_text: str = ""
    ) -> Shape:
        """The shape of a stored task (`params_text` as `params_text` writes it; `block_shape`
        None, as the store's repository gives it, for a shape without block scales).

        Raises:
            ValueError: `params_text` is not `name=value` pairs separated by commas.
        """
        params = []
        for item in filter(None, params_text.split(",")):
            match = _PARAM_RE.fullmatch(item)
            if match is None:
                raise ValueError(f"shape params {params_text!r} are not name=value pairs")
            params.append((match[1], int(match[2])))
        return cls(int(N), int(K), as_block_shape(block_shape), tuple(sorted(params)))


# The family of a store row that names none (imported files are the dense GEMM's): the name of
# `tuner.kernels.dense.family.DENSE` (the registry, which this module cannot import, names it
# too).
_ROW_DEFAULT_FAMILY = "dense"


def store_columns(family: str, params: Sequence[tuple[str, int]] = ()) -> dict[str, str]:
    """The store's loose columns of a kernel family and its dimensions beyond N and K: the one
    place they are written (`db.repo.create_sweep`, `task_winners`, a release's files).

    Args:
        family: the family's key, e.g. "moe".
        params: sorted (name, value) pairs, as `Shape.params`.

    Returns:
        {"family": family, "shape_params": "E=128,top_k=8"} ("" for no params).
    """
    return {"family": family, "shape_params": _params_text(sorted(params))}


@dataclass(frozen=True)
class FamilyShape:
    """A kernel family's key and the shape it tunes: what a task, a merged file, a skipped
    shape and a report section are keyed by. Sorts as files are listed: by family, the params
    as the store writes them, N, K, block_shape.

    Attributes:
        family: the family's key (`KernelFamily.name`, e.g. "dense", "moe").
        shape: N, K, block_shape and the family's other dimensions.
    """

    family: str
    shape: Shape

    @property
    def sort_key(self) -> tuple[str, str, int, int, tuple[int, ...]]:
        """(family, params text, N, K, block_shape): the order of a device's files; a shape
        without block scales sorts its block shape as () (`block_sort_key`)."""
        s = self.shape
        return (self.family, s.params_text, s.N, s.K, block_sort_key(s.block_shape))

    def __lt__(self, other: FamilyShape) -> bool:
        """Order by `sort_key`."""
        return self.sort_key < other.sort_key

    @classmethod
    def of_row(cls, row: Any) -> FamilyShape:
        """The key of a store row (a task, winner or coverage row): its `N`, `K`,
        `block_shape`, and `family` and `shape_params` where it has them (a row without is the
        dense GEMM's, as imports are). The one place those columns are read.

        Raises:
            ValueError: `shape_params` is not `name=value` pairs.
        """
        shape = Shape.from_store(row.N, row.K, row.block_shape, getattr(row, "shape_params", ""))
        return cls(getattr(row, "family", _ROW_DEFAULT_FAMILY), shape)

    def store_fields(self) -> dict[str, str]:
        """The store's `family` and `shape_params` columns of this key (`store_columns`)."""
        return store_columns(self.family, self.shape.params)


class ShapeKeyed:
    """A record that carries a `key` (`FamilyShape`): its N, K, block_shape and family."""

    key: FamilyShape

    @property
    def N(self) -> int:
        """The rows of the weight [N, K]."""
        return self.key.shape.N

    @property
    def K(self) -> int:
        """The reduction dimension."""
        return self.key.shape.K

    @property
    def block_shape(self) -> tuple[int, int] | None:
        """[group_n, group_k] of the weight scales; None: per-tensor scales."""
        return self.key.shape.block_shape

    @property
    def family(self) -> str:
        """The kernel family's key, e.g. "moe"."""
        return self.key.family


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
        values = zip(row, names, strict=True)
        parsed.append(tuple(positive(v, f"{where}: {prefix}{name}", MAX_DIM) for v, name in values))
    return parsed
