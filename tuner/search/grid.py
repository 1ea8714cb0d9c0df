"""Exhaustive search: every config of the space, warm-start configs first."""

from __future__ import annotations

from collections.abc import Sequence

from tuner.kernels.config import KernelConfig
from tuner.search.base import BudgetedEvaluate, Evaluate, History, Strategy


class GridStrategy(Strategy):
    """Evaluates the whole space in order (vLLM's tuning script does this with 1,280 configs).

    `budget` caps the number of configs; pass `len(space)` or more for an exhaustive run.
    """

    name = "grid"

    def search(
        self,
        evaluate: Evaluate,
        *,
        space: Sequence[KernelConfig],
        budget: int,
        seed: int,
        warm_start: Sequence[KernelConfig] = (),
    ) -> History:
        """Evaluate the warm-start configs of the space, then the space in its order, up to
        `budget` distinct configs. Warm-start configs outside the space are not evaluated."""
        tracker = BudgetedEvaluate(evaluate, space, budget)
        tracker.warm_start(self.planned(space=space, seed=seed, warm_start=warm_start))
        return tracker.history

    def planned(
        self, *, space: Sequence[KernelConfig], seed: int, warm_start: Sequence[KernelConfig] = ()
    ) -> list[KernelConfig]:
        """Every config `search` measures, in order: the warm starts of the space, then the
        space."""
        return super().planned(space=space, seed=seed, warm_start=[*warm_start, *space])
