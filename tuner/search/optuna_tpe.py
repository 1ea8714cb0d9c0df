"""Optuna's TPE sampler over the axes of a config space (block sizes as log2 exponents),
warm-started with known good configs."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from tuner.kernels.config import KernelConfig
from tuner.search.axes import Axis, space_axes
from tuner.search.base import Evaluate, History, Strategy
from tuner.search.budget import BudgetedEvaluate

# Asks per distinct config before giving up on a small or mostly-visited space.
MAX_ASKS_PER_TRIAL = 20
# Random proposals before TPE models the results (optuna's default is 10); warm-start configs
# count among them.
N_STARTUP_TRIALS = 8


def run_tpe(
    tracker: BudgetedEvaluate,
    axes: Sequence[Axis],
    *,
    seed: int,
    warm_start: Sequence[KernelConfig],
    stop_at: int,
) -> None:
    """Let TPE propose configs until the tracker has measured `stop_at` distinct configs.

    Every axis is an integer parameter (`Axis.coordinate`: log2 exponents of block sizes and
    warps, num_stages as is, GROUP_SIZE_M as its index), so TPE's Parzen estimators see which
    values are near each other. Warm-start configs are enqueued first (`Study.enqueue_trial`).
    A proposal outside the space is told as failed without being measured; a config proposed
    again is answered from the tracker and told again; failed trials (out of resources, wrong
    results) are told as failed, which TPE leaves out of its density estimates.

    Args:
        tracker: the shared, budgeted evaluate (it may hold earlier results; they are told to
            TPE first so it starts from what is known).
        axes: the axes of the space.
        seed: TPE's seed.
        warm_start: configs to enqueue, in order.
        stop_at: distinct configs measured when TPE stops (at most the tracker's budget).
    """
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with warnings.catch_warnings():  # multivariate TPE is marked experimental
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler = optuna.samplers.TPESampler(
            seed=seed, n_startup_trials=N_STARTUP_TRIALS, multivariate=True
        )
    study = optuna.create_study(direction="minimize", sampler=sampler)
    distributions: dict[str, optuna.distributions.BaseDistribution] = {
        axis.param: optuna.distributions.IntDistribution(axis.low, axis.high) for axis in axes
    }

    def params(config: KernelConfig) -> dict[str, int]:
        return {axis.param: axis.coordinate(getattr(config, axis.key)) for axis in axes}

    for config, result in tracker.history:
        state = optuna.trial.TrialState.COMPLETE if result.ok else optuna.trial.TrialState.FAIL
        study.add_trial(
            optuna.trial.create_trial(
                params=params(config),
                distributions=distributions,
                state=state,
                value=result.latency_us if result.ok else None,
            )
        )
    for config in dict.fromkeys(warm_start):
        if config in tracker.allowed and config not in tracker.results:
            study.enqueue_trial(params(config))
    stop_at = min(stop_at, tracker.budget)
    asks = 0
    while len(tracker.history) < stop_at and asks < MAX_ASKS_PER_TRIAL * tracker.budget:
        asks += 1
        trial = study.ask(distributions)
        config = KernelConfig(**{axis.key: axis.value(trial.params[axis.param]) for axis in axes})
        measured = tracker(config)
        if measured is not None and measured.ok:
            study.tell(trial, measured.ok_latency_us)
        else:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)


class OptunaStrategy(Strategy):
    """TPE (seeded, multivariate) over integer coordinates of each config key.

    A config TPE proposes twice is answered from the first result and does not count again.
    """

    name = "optuna"

    def search(
        self,
        evaluate: Evaluate,
        *,
        space: Sequence[KernelConfig],
        budget: int,
        seed: int,
        warm_start: Sequence[KernelConfig] = (),
    ) -> History:
        """Enqueue `warm_start`, then let TPE propose until `budget` distinct configs ran."""
        tracker = BudgetedEvaluate(evaluate, space, budget)
        run_tpe(
            tracker, space_axes(space), seed=seed, warm_start=warm_start, stop_at=tracker.budget
        )
        return tracker.history
