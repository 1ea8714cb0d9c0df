"""The axes of a config space as ordered integer coordinates: log2 exponents for power-of-two
axes, so that searches can use the order of block sizes, warps and stages."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import combinations

from tuner.core import CONFIG_KEYS
from tuner.kernels.config import KernelConfig


def _is_power_of_two(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


@dataclass(frozen=True)
class Axis:
    """One config key, its values in the space (ascending) and how they map to integers.

    Attributes:
        key: vLLM's config key, e.g. "BLOCK_SIZE_M".
        values: the values the space uses, ascending.
        log2: the values are consecutive powers of two: coordinates are log2 exponents.
    """

    key: str
    values: tuple[int, ...]
    log2: bool

    @property
    def param(self) -> str:
        """Parameter name as a search library sees it, e.g. `log2_BLOCK_SIZE_M`."""
        return f"log2_{self.key}" if self.log2 else self.key

    @property
    def low(self) -> int:
        """Smallest coordinate."""
        return self.coordinate(self.values[0])

    @property
    def high(self) -> int:
        """Largest coordinate."""
        return self.coordinate(self.values[-1])

    def coordinate(self, value: int) -> int:
        """A value's integer coordinate: its log2 for log2 axes, its value for consecutive
        integers (num_stages), else its index among the values (GROUP_SIZE_M: 1, 16, 32, 64)."""
        if self.log2:
            return value.bit_length() - 1
        if self._consecutive:
            return value
        return self.values.index(value)

    def value(self, coordinate: int) -> int:
        """Inverse of `coordinate`."""
        if self.log2:
            return 1 << coordinate
        if self._consecutive:
            return coordinate
        return self.values[coordinate]

    @property
    def _consecutive(self) -> bool:
        return list(self.values) == list(range(self.values[0], self.values[-1] + 1))


def space_axes(space: Sequence[KernelConfig]) -> tuple[Axis, ...]:
    """The six axes of a space, in vLLM's key order.

    Args:
        space: the candidate configs.

    Returns:
        One Axis per config key; power-of-two axes with consecutive exponents (block sizes,
        num_warps) are log2 axes, num_stages never is.

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
            all(_is_power_of_two(value) for value in values)
            and exponents == list(range(exponents[0], exponents[-1] + 1))
            and len(values) > 1
        )
        if key == "num_stages":
            log2 = False  # stages are counted, not scaled
        axes.append(Axis(key, values, log2))
    return tuple(axes)


def neighbours(
    config: KernelConfig,
    axes: Sequence[Axis],
    *,
    pairs: bool = False,
    categorical: frozenset[str] = frozenset(),
) -> Iterator[KernelConfig]:
    """Configs one step away along one axis (the next value up or down), and with `pairs`
    also one step along each of two axes at once.

    Steps follow each axis's sorted values, so on a log2 axis a step halves or doubles.

    Args:
        config: the centre; its values must be on the axes.
        axes: from `space_axes`.
        pairs: also yield the two-axis (diagonal) moves, after the one-axis ones.
        categorical: keys of axes whose values are unordered: a step along one goes to any
            other value of the axis, not only the next one up or down.

    Returns:
        An iterator of configs in a fixed order; they may lie outside the space (a space that
        is not a full product of its axes).
    """
    position = {axis.key: axis.values.index(getattr(config, axis.key)) for axis in axes}

    def steps(axis: Axis) -> list[int]:
        if axis.key not in categorical:
            return [-1, 1]
        return [i - position[axis.key] for i in range(len(axis.values)) if i != position[axis.key]]

    moves: list[tuple[tuple[str, int], ...]] = [
        ((axis.key, step),) for axis in axes for step in steps(axis)
    ]
    if pairs:
        moves += [
            ((a.key, sa), (b.key, sb))
            for a, b in combinations(axes, 2)
            for sa in steps(a)
            for sb in steps(b)
        ]
    by_key = {axis.key: axis for axis in axes}
    for move in moves:
        values = config.as_dict()
        for key, step in move:
            index = position[key] + step
            if not 0 <= index < len(by_key[key].values):
                break
            values[key] = by_key[key].values[index]
        else:
            yield KernelConfig(**values)
