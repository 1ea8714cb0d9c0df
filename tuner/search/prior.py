"""A cross-task prior: what a device's earlier tasks say of each config's speed, fitted once per
task and used by `guided` to order a centre's neighbours (the most promising first) where it
would otherwise draw them in a seeded random order.

A sweep tunes every M of a shape and every shape of a model on one device, and the same tiles,
warps and stages win on neighbouring tasks: the warm starts carry only those winners, the
store holds every trial. Measured (bench/README.md, replayed sweeps of the four design
landscapes, seeds 0-29): (problem, seed) pairs below 0.97 of the optimum at 16 / 32 / 64
trials 678 / 247 / 50 -> 625 / 222 / 31, none at 128 either way.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from tuner.kernels.config import KernelConfig
from tuner.search.base import TaskTimings
from tuner.search.warm_start import related_tasks

if TYPE_CHECKING:
    import numpy as np

# Fewest ok trials, over all related tasks, before a prior is fitted.
MIN_TRIALS = 8
# Most related tasks of the same (N, K) (the nearest M) and of the same M (other shapes). Tried
# 1/0, 1/1, 2/2 and every earlier task of either kind; 1/1 left the fewest (problem, seed) pairs
# below 0.97 at 32 trials and about as few as 2/2 at 16 and 64 (bench/README.md).
NEIGHBOURS = 1
SAME_M_OTHERS = 1


def related(
    task: tuple[int, int, int],
    timings: Mapping[tuple[int, int, int], TaskTimings],
    *,
    max_neighbours: int = NEIGHBOURS,
    max_same_m_others: int = SAME_M_OTHERS,
) -> list[TaskTimings]:
    """The timings a task learns from, the nearest of the tasks its warm starts come from
    (`warm_start.related_tasks`): the same (N, K) at the nearest other M in log2 (ties: the
    smaller M), then other (N, K) at the same M, in (N, K) order. Only the nearest: the
    fastest tiles change with M (small M wants a small BLOCK_SIZE_M), and more tasks made the
    prior worse.

    Args:
        task: (N, K, M) of the task.
        timings: ok trials of the device's earlier tasks, by (N, K, M).
        max_neighbours, max_same_m_others: most tasks of each kind.
    """
    near, others = related_tasks(sorted(timings), N=task[0], K=task[1], M=task[2])
    return [timings[key] for key in near[:max_neighbours] + others[:max_same_m_others]]


def fit_prior(
    configs: Sequence[KernelConfig], x: np.ndarray, tasks: Sequence[TaskTimings], ridge: float
) -> dict[KernelConfig, float] | None:
    """Predicted log(latency_us), relative across configs, of every config of a space: a ridge
    regression on `x`'s features of every related task's ok trials, each task's log(latency_us)
    centred on its own mean (tasks differ in scale, not in which config is faster).

    Args:
        configs: the space, one row of `x` each, in order.
        x: float64 (len(configs), F) features (`features.features`).
        tasks: ok trials of the related tasks; configs outside `configs` are skipped, and a
            config timed twice in a task counts once, at its fastest.
        ridge: penalty on the feature weights.

    Returns:
        {config: predicted relative log(latency_us)} over `configs` (lower is faster), or None
        with fewer than MIN_TRIALS usable trials.
    """
    import numpy as np

    row = {config: i for i, config in enumerate(configs)}
    rows: list[int] = []
    y: list[float] = []
    for timings in tasks:
        fastest: dict[int, float] = {}
        for config, latency_us in timings:
            i = row.get(config)
            if i is not None and latency_us > 0:
                fastest[i] = min(fastest.get(i, math.inf), latency_us)
        if len(fastest) < 2:
            continue
        logs = {i: math.log(latency_us) for i, latency_us in fastest.items()}
        mean = sum(logs.values()) / len(logs)
        rows += logs
        y += [value - mean for value in logs.values()]
    if len(rows) < MIN_TRIALS:
        return None
    a = x[rows]
    weights = np.linalg.solve(a.T @ a + ridge * np.eye(a.shape[1]), a.T @ np.array(y))
    predicted = x @ weights
    return {config: float(predicted[i]) for i, config in enumerate(configs)}
