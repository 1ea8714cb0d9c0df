"""Optuna's TPE sampler over the axes of a config space (each value as its index on its axis:
block sizes as log2 steps), warm-started with known good configs."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import optuna

from tuner.kernels.config import KernelConfig
from tuner.search.axes import Axis, space_axes
from tuner.search.base import BudgetedEvaluate, Evaluate, History, Strategy

# Asks per distinct config before giving up on a small or mostly-visited space.
MAX_ASKS_PER_TRIAL = 20
# Random proposals before TPE models the results (optuna's default is 10); warm-start configs
# count among them.
N_STARTUP_TRIALS = 8


def param_name(axis: Axis) -> str:
    """An axis's parameter name: `log2_<key>` for consecutive powers of two (num_stages is
    counted, not scaled), else the key. TPE orders its dimensions by name, so the names fix
    what a seed draws: these are the names every earlier sweep was searched with."""
    exponents = [value.bit_length() - 1 for value in axis.values]
    log2 = (
        axis.key != "num_stages"
        and len(exponents) > 1
        and all(value > 0 and value & (value - 1) == 0 for value in axis.values)
        and exponents == list(range(exponents[0], exponents[-1] + 1))
    )
    return f"log2_{axis.key}" if log2 else axis.key


class OptunaStrategy(Strategy):
    """TPE (seeded, multivariate) over an integer parameter per config key, the value's index
    on its axis (`axes.Axis`: a step is a doubling of a block size or of the warps, one stage,
    the next GROUP_SIZE_M), so that its Parzen estimators see which values are near each
    other. Warm starts are enqueued first. A proposal outside the space, or that failed, is
    told as failed (TPE leaves it out of its densities); one proposed again is answered from
    the first result and does not count again."""

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
        axes = space_axes(space)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        with warnings.catch_warnings():  # multivariate TPE is marked experimental
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            sampler = optuna.samplers.TPESampler(
                seed=seed, n_startup_trials=N_STARTUP_TRIALS, multivariate=True
            )
        study = optuna.create_study(direction="minimize", sampler=sampler)
        distributions: dict[str, optuna.distributions.BaseDistribution] = {
            param_name(axis): optuna.distributions.IntDistribution(0, len(axis.values) - 1)
            for axis in axes
        }
        for config in dict.fromkeys(warm_start):
            if config in tracker.allowed:
                study.enqueue_trial(
                    {
                        param_name(axis): axis.values.index(getattr(config, axis.key))
                        for axis in axes
                    }
                )
        asks = 0
        while len(tracker.history) < tracker.budget and asks < MAX_ASKS_PER_TRIAL * tracker.budget:
            asks += 1
            trial = study.ask(distributions)
            values = {axis.key: axis.values[trial.params[param_name(axis)]] for axis in axes}
            measured = tracker(KernelConfig(**values))
            if measured is not None and measured.ok:
                study.tell(trial, measured.ok_latency_us)
            else:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
        return tracker.history
