"""The strategy interface (search a config space through an `evaluate` callable, within a
budget) and the bookkeeping every strategy shares: distinct configs of the space only, within
the budget."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar, Protocol

from tuner.core import TrialStatus
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
