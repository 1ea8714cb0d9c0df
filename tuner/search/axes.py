"""The axes of a config space as ordered integer coordinates (log2 exponents for power-of-two
axes), and the neighbours of a config along them."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import combinations

from tuner.core import CONFIG_KEYS
from tuner.kernels.config import KernelConfig


@dataclass(frozen=True)
class Axis:
    """One config key and its values in the space, ascending; `log2`: they are consecutive
    powers of two, whose coordinates are their exponents."""

    key: str
    values: tuple[int, ...]
    log2: bool

    @property
    def param(self) -> str:
        """Parameter name as a search library sees it, e.g. `log2_BLOCK_SIZE_M`."""
        return f"log2_{self.key}" if self.log2 else self.key

    def coordinate(self, value: int) -> int:
        """A value's integer coordinate: its log2 on a log2 axis, the value itself for
        consecutive integers (num_stages), else its index (GROUP_SIZE_M: 1, 16, 32, 64)."""
        if self.log2:
            return value.bit_length() - 1
        return value if self._consecutive else self.values.index(value)

    def value(self, coordinate: int) -> int:
        """Inverse of `coordinate`."""
        if self.log2:
            return 1 << coordinate
        return coordinate if self._consecutive else self.values[coordinate]

    @property
    def _consecutive(self) -> bool:
        return list(self.values) == list(range(self.values[0], self.values[-1] + 1))


def space_axes(space: Sequence[KernelConfig]) -> tuple[Axis, ...]:
    """The six axes of a space, in vLLM's key order; num_stages is never a log2 axis (stages
    are counted, not scaled).

    Raises:
        ValueError: the space is empty.
    """
    if not space:
        raise ValueError("the config space is empty")
    axes = []
    for key in CONFIG_KEYS:
        values = tuple(sorted({getattr(config, key) for config in space}))
        exponents = [value.bit_length() - 1 for value in values]
        log2 = (
            key != "num_stages"
            and len(values) > 1
            and all(value > 0 and value & (value - 1) == 0 for value in values)
            and exponents == list(range(exponents[0], exponents[-1] + 1))
        )
        axes.append(Axis(key, values, log2))
    return tuple(axes)


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
