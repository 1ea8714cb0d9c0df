"""What a task starts from and learns from (pure: the caller reads the store): its warm starts,
vLLM's default then winners of neighbouring M of the same shape and of the same M on other
shapes of the device, and the ok trials of the nearest of those tasks (`related`)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TypeVar

from tuner.kernels.config import KernelConfig
from tuner.search.base import TaskTimings

# How many winners of each kind a task starts from (more leaves less budget to the search).
MAX_NEIGHBOURS = 2
MAX_SAME_M_OTHERS = 2
# How many related tasks of each kind a task learns from. Tried 1/0, 1/1, 2/2 and every earlier
# task of either kind; 1/1 left the fewest (problem, seed) pairs below 0.97 at 32 trials and
# about as few as 2/2 at 16 and 64 (bench/README.md).
RELATED_NEIGHBOURS = 1
RELATED_SAME_M_OTHERS = 1

_Task = TypeVar("_Task", bound=tuple)


def warm_start_for_task(
    winners: Iterable[tuple[int, int, int, KernelConfig]],
    *,
    N: int,
    K: int,
    M: int,
    default: KernelConfig,
) -> list[KernelConfig]:
    """A task's warm starts, distinct: `default` (vLLM's default config), then the winners of
    MAX_NEIGHBOURS tasks of the same (N, K) at other M, nearest in log2(M) first (ties: the
    smaller M), then of MAX_SAME_M_OTHERS tasks of other (N, K) at exactly this M, in (N, K)
    order.

    Args:
        winners: (N, K, M, config) of finished tasks of the device (same block_shape and
            out_dtype), e.g. from `db.repo.task_winners`.
        N, K, M: the task's.
    """
    near, others = related_tasks(winners, N=N, K=K, M=M)
    nearest = list(dict.fromkeys(config for *_, config in near))[:MAX_NEIGHBOURS]
    same_m = list(dict.fromkeys(config for *_, config in others))[:MAX_SAME_M_OTHERS]
    return list(dict.fromkeys([default, *nearest, *same_m]))


def related(
    task: tuple[int, int, int], timings: Mapping[tuple[int, int, int], TaskTimings]
) -> list[TaskTimings]:
    """The timings a task (N, K, M) learns from: the nearest of the tasks its warm starts come
    from, RELATED_NEIGHBOURS of the same (N, K) and RELATED_SAME_M_OTHERS of the same M. Only
    the nearest: the fastest tiles change with M, and more tasks made the prior worse.

    Args:
        task: (N, K, M) of the task.
        timings: ok trials of the device's earlier tasks, by (N, K, M).
    """
    near, others = related_tasks(sorted(timings), N=task[0], K=task[1], M=task[2])
    chosen = near[:RELATED_NEIGHBOURS] + others[:RELATED_SAME_M_OTHERS]
    return [timings[key] for key in chosen]


def related_tasks(
    tasks: Iterable[_Task], *, N: int, K: int, M: int
) -> tuple[list[_Task], list[_Task]]:
    """The tasks (tuples that begin with (N, K, M)) a task of (N, K, M) takes its warm starts
    from and learns from, nearest first: (the same (N, K) at another M, nearest in log2(M)
    first, ties to the smaller M; another (N, K) at this M, in (N, K) order); ties keep the
    order of `tasks`."""
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
