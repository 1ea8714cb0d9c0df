"""The strategy interface (search a config space through an `evaluate` callable, within a
budget), the bookkeeping every strategy shares (distinct configs of the space only, within
the budget), the axes of a config space as ordered values (a value's coordinate is its index)
with the neighbours of a config along them, and what a task starts from and learns from (pure:
the caller reads the store): its warm starts, vLLM's default then winners of neighbouring M of
the same shape and of the same M on other shapes of the device, and the ok trials of the
nearest of those tasks (`related`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import ClassVar, Protocol, TypeVar

from tuner.core import CONFIG_KEYS, TrialStatus
from tuner.kernels.config import KernelConfig
from tuner.measure.trial import TrialResult

# Measures one config; the worker behind it records the trial and answers repeats from the store.
Evaluate = Callable[[KernelConfig], TrialResult]
History = list[tuple[KernelConfig, TrialResult]]
# The ok trials of one earlier task of the device: (config, latency_us).
TaskTimings = Sequence[tuple[KernelConfig, float]]
# Outcomes known before a kernel is launched (a static constraint, the compiler, or the
# compile-for-target check of tuner.run.worker.CompileAhead): no GPU time was measured for them.
PRUNED = frozenset({TrialStatus.INVALID, TrialStatus.COMPILE_ERROR, TrialStatus.OUT_OF_RESOURCES})


class Strategy(Protocol):
    """A search strategy. It never touches the GPU or the store: it only calls `evaluate`.

    A strategy subclasses this protocol and writes `name` and `search`; the rest has defaults.

    Attributes:
        name: the name it is registered under (`tuner.search.registry.STRATEGIES`).
        free: trial statuses its budget does not count (e.g. `PRUNED`); the worker's trial cap
            on a resumed task leaves them out too (`tuner.run.worker`).
        reads_related: whether `search` also takes `related` (a keyword argument,
            Sequence[TaskTimings]): the ok trials of the device's nearest related earlier
            tasks (`warm_start.related`), the same on every resumption of a task. The worker
            reads them from the store, and passes them, only to such a strategy.
    """

    name: str
    free: ClassVar[frozenset[TrialStatus]] = frozenset()
    reads_related: ClassVar[bool] = False

    def search(
        self,
        evaluate: Evaluate,
        *,
        space: Sequence[KernelConfig],
        budget: int,
        seed: int,
        warm_start: Sequence[KernelConfig] = (),
    ) -> History:
        """Evaluate up to `budget` distinct configs of `space` (warm starts count), the
        warm starts of the space first and in order, reproducibly for a `seed`, and return
        (config, result) for every distinct config evaluated, in order."""
        ...

    def planned(
        self, *, space: Sequence[KernelConfig], seed: int, warm_start: Sequence[KernelConfig] = ()
    ) -> list[KernelConfig]:
        """The configs `search` (same arguments) evaluates first whatever their results, in
        order (what a compile pool can prepare before the GPU asks, `run.worker.CompileAhead`):
        by default the warm starts that are in the space, each once."""
        allowed = frozenset(space)
        return [c for c in dict.fromkeys(warm_start) if c in allowed]


def best(history: History) -> tuple[KernelConfig, TrialResult] | None:
    """The fastest correct (config, result) of a history, or None when none ran correctly."""
    ok = ((config, result) for config, result in history if result.ok)
    return min(ok, key=lambda item: item[1].ok_latency_us, default=None)


class BudgetedEvaluate:
    """Wraps `evaluate`: each config of the space is measured at most once, and at most
    `budget` distinct configs in all (those whose outcome is in `free` not counted).

    Attributes:
        history: (config, result) of every distinct config measured, in order.
        results: the same, by config.
        budget: most distinct configs to measure (capped at the size of the space).
        spent: configs measured that count against the budget.
    """

    def __init__(
        self,
        evaluate: Evaluate,
        space: Sequence[KernelConfig],
        budget: int,
        free: frozenset[TrialStatus] = frozenset(),
    ) -> None:
        self._evaluate = evaluate
        self.allowed = frozenset(space)
        self.budget = min(budget, len(self.allowed))
        self.free = free
        self.history: History = []
        self.results: dict[KernelConfig, TrialResult] = {}
        self.spent = 0

    @property
    def left(self) -> int:
        """Distinct configs that may still be measured."""
        return self.budget - self.spent

    def __call__(self, config: KernelConfig) -> TrialResult | None:
        """The result of a config, measured now or remembered; None when it is outside the
        space, or new while the budget is spent."""
        if config in self.results:
            return self.results[config]
        if config not in self.allowed or self.left <= 0:
            return None
        result = self._evaluate(config)
        self.results[config] = result
        self.history.append((config, result))
        self.spent += result.status not in self.free
        return result

    def warm_start(self, configs: Sequence[KernelConfig]) -> None:
        """Measure the warm-start configs of the space first, in order, within the budget."""
        for config in dict.fromkeys(configs):
            self(config)


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
