"""Bookkeeping every strategy shares: distinct configs of the space only, within the budget."""

from __future__ import annotations

from collections.abc import Sequence

from tuner.core import TrialStatus
from tuner.kernels.config import KernelConfig
from tuner.measure.trial import TrialResult
from tuner.search.base import Evaluate, History

# Outcomes known before a kernel is launched (a static constraint, the compiler, or the
# compile-for-target check of tuner.run.compile_gate): no GPU time was measured for them.
PRUNED = frozenset({TrialStatus.INVALID, TrialStatus.COMPILE_ERROR, TrialStatus.OUT_OF_RESOURCES})


class BudgetedEvaluate:
    """Wraps `evaluate`: each config of the space is measured at most once, and at most
    `budget` distinct configs in all (those whose outcome is in `free` not counted); the
    history keeps them in order.

    Attributes:
        history: (config, result) of every distinct config measured, in order.
        results: the same, by config.
        budget: most distinct configs to measure (capped at the size of the space).
        free: statuses that cost no budget (e.g. PRUNED); empty: every config counts.
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
        """The result of a config: measured now, or remembered.

        Returns:
            None when the config is outside the space, or new while the budget is spent.
        """
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

    def incumbent(self) -> tuple[KernelConfig, float] | None:
        """The fastest ok config so far and its latency_us (ties: the earlier one), or None."""
        best: tuple[KernelConfig, float] | None = None
        for config, result in self.history:
            if result.ok and (best is None or result.ok_latency_us < best[1]):
                best = (config, result.ok_latency_us)
        return best
