"""Warm-start configs for one task: vLLM's default, winners of neighbouring M of the same shape,
and winners of the same M on other shapes of the device (pure: the caller reads the store)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from tuner.kernels.config import KernelConfig

# How many winners of each kind a task starts from (more leaves less budget to the search).
MAX_NEIGHBOURS = 2
MAX_SAME_M_OTHERS = 2


def warm_start_configs(
    default: KernelConfig,
    neighbours: Sequence[KernelConfig],
    same_m_others: Sequence[KernelConfig],
) -> list[KernelConfig]:
    """The warm-start list a strategy receives: default first, then the neighbouring-M winners,
    then the same-M winners of other shapes, each in the given order, duplicates dropped.

    Args:
        default: vLLM's default config (the baseline every task measures).
        neighbours: winners of the same (N, K) at other M, nearest M first.
        same_m_others: winners of the same M on other (N, K) of the device.

    Returns:
        The distinct configs in that order.
    """
    return list(dict.fromkeys([default, *neighbours, *same_m_others]))


def warm_start_for_task(
    winners: Iterable[tuple[int, int, int, KernelConfig]],
    *,
    N: int,
    K: int,
    M: int,
    default: KernelConfig,
    max_neighbours: int = MAX_NEIGHBOURS,
    max_same_m_others: int = MAX_SAME_M_OTHERS,
) -> list[KernelConfig]:
    """Pick a task's warm starts from the winners known for its device.

    Neighbours are winners of the same (N, K) at other M, nearest in log2(M) first (ties: the
    smaller M); same-M others are winners of other (N, K) at exactly this M, in (N, K) order.

    Args:
        winners: (N, K, M, config) of finished tasks of the device (same block_shape and
            out_dtype), e.g. from `db.repo.task_winners`.
        N: rows of B of the task.
        K: the task's reduction dimension.
        M: the task's rows of A.
        default: vLLM's default config.
        max_neighbours: most neighbouring-M winners.
        max_same_m_others: most same-M winners of other shapes.

    Returns:
        `warm_start_configs(default, neighbours, same_m_others)`.
    """
    neighbours: list[tuple[float, int, KernelConfig]] = []
    others: list[tuple[int, int, KernelConfig]] = []
    for n, k, m, config in winners:
        if (n, k) == (N, K) and m != M:
            neighbours.append((abs(math.log2(m) - math.log2(M)), m, config))
        elif (n, k) != (N, K) and m == M:
            others.append((n, k, config))
    near = [config for *_, config in sorted(neighbours, key=lambda item: item[:2])]
    far = [config for *_, config in sorted(others, key=lambda item: item[:2])]
    return warm_start_configs(default, list(dict.fromkeys(near))[:max_neighbours],
                              list(dict.fromkeys(far))[:max_same_m_others])
