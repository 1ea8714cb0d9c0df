"""Exhaustive search: every config of the space, warm-start configs first."""

from __future__ import annotations

from collections.abc import Sequence

from tuner.space import KernelConfig
from tuner.strategies.base import Evaluate, History


class GridStrategy:
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
        """Evaluate warm-start configs, then the space in its order, up to `budget` distinct."""
        ordered = list(dict.fromkeys([*warm_start, *space]))
        return [(config, evaluate(config)) for config in ordered[:budget]]
