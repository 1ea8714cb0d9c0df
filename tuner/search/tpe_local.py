"""TPE first, then best-first neighbourhood search from what TPE found ("tpe+local")."""

from __future__ import annotations

from collections.abc import Sequence

from tuner.kernels.config import KernelConfig
from tuner.search.axes import space_axes
from tuner.search.base import Evaluate, History, Strategy
from tuner.search.budget import BudgetedEvaluate
from tuner.search.local import run_local
from tuner.search.optuna_tpe import run_tpe

# Share of the budget TPE spends (warm starts included) before the local search takes over.
TPE_SHARE = 0.25


class TpeLocalStrategy(Strategy):
    """TPE explores the space for TPE_SHARE of the budget; the rest climbs from its best
    configs over the log2 axes (see `run_local`)."""

    name = "tpe+local"

    def __init__(self, tpe_share: float = TPE_SHARE) -> None:
        if not 0.0 <= tpe_share <= 1.0:
            raise ValueError(f"tpe_share must be within [0, 1], got {tpe_share}")
        self.tpe_share = tpe_share

    def search(
        self,
        evaluate: Evaluate,
        *,
        space: Sequence[KernelConfig],
        budget: int,
        seed: int,
        warm_start: Sequence[KernelConfig] = (),
    ) -> History:
        """Warm starts and TPE up to TPE_SHARE of `budget`, then local search to `budget`."""
        tracker = BudgetedEvaluate(evaluate, space, budget)
        axes = space_axes(space)
        tracker.warm_start(warm_start)
        tpe_until = max(len(tracker.history), round(self.tpe_share * tracker.budget))
        run_tpe(tracker, axes, seed=seed, warm_start=(), stop_at=tpe_until)
        run_local(tracker, axes, seed=seed, stop_at=tracker.budget)
        return tracker.history
