"""The axes of a config space as ordered values (a value's coordinate is its index), and the
neighbours of a config along them."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import combinations

from tuner.core import CONFIG_KEYS
from tuner.kernels.config import KernelConfig


@dataclass(frozen=True)
class Axis:
    """One config key and its values in the space, ascending. A value's coordinate is its
    index: block sizes and warps are consecutive powers of two, so their index steps are
    doublings; num_stages counts; GROUP_SIZE_M (1, 16, 32, 64) is ordered, not spaced."""

    key: str
    values: tuple[int, ...]


def space_axes(space: Sequence[KernelConfig]) -> tuple[Axis, ...]:
    """The six axes of a space, in vLLM's key order.

    Raises:
        ValueError: the space is empty.
    """
    if not space:
        raise ValueError("the config space is empty")
    return tuple(
        Axis(key, tuple(sorted({getattr(config, key) for config in space}))) for key in CONFIG_KEYS
    )


def neighbours(
    config: KernelConfig,
    axes: Sequence[Axis],
    *,
    pairs: bool = False,
    categorical: frozenset[str] = frozenset(),
) -> Iterator[KernelConfig]:
    """Configs one step away along one axis (the next value up or down in the axis's sorted
    values: on a log2 axis, half or double), then with `pairs` one step along each of two axes
    at once, in a fixed order. A step along a `categorical` axis (unordered values) goes to any
    other value. They may lie outside the space (one that is not a full product of its axes)."""
    values = config.as_dict()
    targets = []  # per axis, the indices of the values one step away
    for axis in axes:
        at = axis.values.index(values[axis.key])
        near = range(len(axis.values)) if axis.key in categorical else (at - 1, at + 1)
        targets.append([i for i in near if i != at and 0 <= i < len(axis.values)])
    for axis, indices in zip(axes, targets, strict=True):
        for i in indices:
            yield KernelConfig(**{**values, axis.key: axis.values[i]})
    if pairs:
        for (a, first), (b, second) in combinations(zip(axes, targets, strict=True), 2):
            for i in first:
                for j in second:
                    yield KernelConfig(**{**values, a.key: a.values[i], b.key: b.values[j]})
