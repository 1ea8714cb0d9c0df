"""Warm-start configs for one task: vLLM's default, winners of neighbouring M of the same shape,
and winners of the same M on other shapes of the device (pure: the caller reads the store)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TypeVar

from tuner.kernels.config import KernelConfig

# How many winners of each kind a task starts from (more leaves less budget to the search).
MAX_NEIGHBOURS = 2
MAX_SAME_M_OTHERS = 2

_Task = TypeVar("_Task", bound=tuple)


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
    near, others = related_tasks(winners, N=N, K=K, M=M)
    return warm_start_configs(
        default,
        list(dict.fromkeys(config for *_, config in near))[:max_neighbours],
        list(dict.fromkeys(config for *_, config in others))[:max_same_m_others],
    )


def related_tasks(
    tasks: Iterable[_Task], *, N: int, K: int, M: int
) -> tuple[list[_Task], list[_Task]]:
    """The tasks a task of (N, K, M) takes its warm starts from (`warm_start_for_task`) and
    learns from (`prior.related`), nearest first.

    Args:
        tasks: tuples that begin with (N, K, M) of an earlier task of the device.
        N, K, M: the task's.

    Returns:
        (neighbours: the same (N, K) at another M, nearest in log2(M) first, ties to the
        smaller M; others: another (N, K) at this M, in (N, K) order); ties keep the order of
        `tasks`.
    """
    near: list[_Task] = []
    others: list[_Task] = []
    for task in tasks:
        n, k, m = task[:3]
        if (n, k) == (N, K) and m != M:
            near.append(task)
        elif (n, k) != (N, K) and m == M:
            others.append(task)
    near.sort(key=lambda task: (abs(math.log2(task[2]) - math.log2(M)), task[2]))
    others.sort(key=lambda task: task[:2])
    return near, others
