"""The strategy interface: search a config space through an `evaluate` callable, within a budget."""

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


class Strategy(Protocol):
    """A search strategy. It never touches the GPU or the store: it only calls `evaluate`.

    A strategy subclasses this protocol and writes `name` and `search`; the optional parts have
    defaults it inherits (as optuna's `BaseSampler` gives its optional hooks default bodies):
    `free` (no outcome is free), `reads_related` (False) and `planned` (the warm starts of the
    space).

    Attributes:
        name: the name it is registered under (`tuner.search.registry.STRATEGIES`).
        free: trial statuses its budget does not count (e.g. `budget.PRUNED`); the worker's
            trial cap on a resumed task leaves them out too (`tuner.run.task`).
        reads_related: whether `search` also takes `related` (a keyword argument,
            Sequence[TaskTimings]): the ok trials of the device's nearest related earlier
            tasks (`prior.related`), to learn which configs are fast (`guided` does,
            `prior.fit_prior`). Like the warm starts, the same on every resumption of a task.
            The worker reads them from the store, and passes them, only to such a strategy.
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

    def planned(
        self, *, space: Sequence[KernelConfig], seed: int, warm_start: Sequence[KernelConfig] = ()
    ) -> list[KernelConfig]:
        """The configs `search` (same arguments) evaluates first whatever their results, in
        order: what a compile pool can prepare before the GPU asks (`base.planned` cuts it to
        the budget). By default the warm starts that are in the space, each once; a strategy
        whose start does not depend on results says more (`grid`: the whole space; `ils`: the
        warm starts, then the tile batch).
        """
        allowed = frozenset(space)
        return [c for c in dict.fromkeys(warm_start) if c in allowed]


def best(history: History) -> tuple[KernelConfig, TrialResult] | None:
    """The fastest correct (config, result) of a history, or None when none ran correctly."""
    ok = [(config, result) for config, result in history if result.ok]
    if not ok:
        return None
    return min(ok, key=lambda item: item[1].ok_latency_us)


def planned(
    strategy: Strategy,
    *,
    space: Sequence[KernelConfig],
    budget: int,
    seed: int,
    warm_start: Sequence[KernelConfig] = (),
) -> list[KernelConfig]:
    """The configs `strategy.search` (same arguments) will evaluate first whatever their
    results, in order, at most `budget` of them (`Strategy.planned`): what a compile pool can
    prepare before the GPU asks (`tuner.run.compile_gate`).
    """
    return strategy.planned(space=space, seed=seed, warm_start=warm_start)[:budget]
