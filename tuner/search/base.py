"""The strategy interface: search a config space through an `evaluate` callable, within a budget."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from tuner.kernels.config import KernelConfig
from tuner.measure.trial import TrialResult

# Measures one config; the worker behind it records the trial and answers repeats from the store.
Evaluate = Callable[[KernelConfig], TrialResult]
History = list[tuple[KernelConfig, TrialResult]]


class Strategy(Protocol):
    """A search strategy. It never touches the GPU or the store: it only calls `evaluate`."""

    name: str

    def search(
        self,
        evaluate: Evaluate,
        *,
        space: Sequence[KernelConfig],
        budget: int,
        seed: int,
        warm_start: Sequence[KernelConfig] = (),
    ) -> History:
        """Evaluate up to `budget` distinct configs of `space`.

        Args:
            evaluate: measures one config.
            space: the candidates, in a deterministic order.
            budget: most distinct configs to evaluate; warm-start configs count.
            seed: makes the sequence of evaluated configs reproducible.
            warm_start: configs to evaluate first, in order (vLLM's default first).

        Returns:
            (config, result) for every distinct config evaluated, in order.
        """
        ...


def best(history: History) -> tuple[KernelConfig, TrialResult] | None:
    """The fastest correct (config, result) of a history, or None when none ran correctly."""
    ok = [(config, result) for config, result in history if result.ok]
    if not ok:
        return None
    return min(ok, key=lambda item: item[1].latency_us)
