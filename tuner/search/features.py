"""The 0/1 encoding of configs that `guided`'s ridge regressions (its guide and the cross-task
prior) are fitted on, and the neighbour matrix of a space."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from itertools import combinations
from typing import TYPE_CHECKING

from tuner.kernels.config import KernelConfig
from tuner.search.axes import Axis

if TYPE_CHECKING:  # numpy is imported where it is used (see `guided`)
    import numpy as np


@functools.lru_cache(maxsize=4)
def encoded(
    space: tuple[KernelConfig, ...], axes: tuple[Axis, ...], categorical: frozenset[str]
) -> tuple[np.ndarray, np.ndarray]:
    """`features` of a space and its neighbour matrix, kept for the next task (a sweep
    searches the same space for every task): adjacent[i, j] is True where config j is one or
    two axes away from config i, each of those axes one value up or down (any other value on
    a categorical axis), as `neighbours(..., pairs=True, categorical=...)` yields them."""
    import numpy as np

    index = _value_index(space, axes).astype(np.int8)
    step = index[:, None, :] - index[None, :, :]
    moved = step != 0
    jumps = np.array([axis.key in categorical for axis in axes])
    changed = moved.sum(axis=2)
    adjacent = (changed >= 1) & (changed <= 2) & ~(moved & (np.abs(step) != 1) & ~jumps).any(axis=2)
    return features(space, axes), adjacent


def _value_index(space: Sequence[KernelConfig], axes: Sequence[Axis]) -> np.ndarray:
    import numpy as np

    return np.array(
        [[axis.values.index(getattr(config, axis.key)) for axis in axes] for config in space],
        dtype=np.int64,
    ).reshape(len(space), len(axes))


def features(space: Sequence[KernelConfig], axes: Sequence[Axis]) -> np.ndarray:
    """One row of 0/1 features per config: one per (axis, value) and one per pair of values
    of two different axes (an interaction, e.g. BLOCK_SIZE_N=128 with num_warps=8).

    Args:
        space: the configs, one row each, in order; their values must be on the axes.
        axes: from `space_axes`.

    Returns:
        float64 array (len(space), F), F = the sum of the axis sizes plus, over every pair of
        axes, the product of their sizes: 21 + 180 = 201 for vLLM's grid.
    """
    import numpy as np

    index = _value_index(space, axes)
    columns = [index[:, a] == v for a, axis in enumerate(axes) for v in range(len(axis.values))]
    for a, b in combinations(range(len(axes)), 2):
        columns += [
            (index[:, a] == va) & (index[:, b] == vb)
            for va in range(len(axes[a].values))
            for vb in range(len(axes[b].values))
        ]
    return np.stack(columns, axis=1).astype(np.float64)
