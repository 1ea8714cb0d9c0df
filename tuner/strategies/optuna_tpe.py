"""Optuna's TPE sampler over the axes of a config space, warm-started with known good configs."""

from __future__ import annotations

from collections.abc import Sequence

from tuner.space import CONFIG_KEYS, KernelConfig
from tuner.strategies.base import Evaluate, History

# Asks per distinct config before giving up on a small or mostly-visited space.
MAX_ASKS_PER_TRIAL = 20


class OptunaStrategy:
    """TPE (seeded) over each config key's values in the space; combinations outside the space
    are told to optuna as failed without being evaluated.

    A config TPE proposes twice is answered from the first result and does not count again.
    Failed trials (compile errors, wrong results) are told as failed, which TPE leaves out of
    its density estimates.
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
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        allowed = set(space)
        axes = {key: sorted({getattr(config, key) for config in space}) for key in CONFIG_KEYS}
        study = optuna.create_study(
            direction="minimize", sampler=optuna.samplers.TPESampler(seed=seed)
        )
        for config in dict.fromkeys(warm_start):
            if config in allowed:
                study.enqueue_trial(config.as_dict())
        budget = min(budget, len(allowed))
        seen: dict[KernelConfig, int] = {}
        history: History = []
        asks = 0
        while len(history) < budget and asks < MAX_ASKS_PER_TRIAL * budget:
            asks += 1
            trial = study.ask()
            config = KernelConfig(
                **{key: trial.suggest_categorical(key, values) for key, values in axes.items()}
            )
            if config not in allowed:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
                continue
            if config in seen:
                result = history[seen[config]][1]
            else:
                result = evaluate(config)
                seen[config] = len(history)
                history.append((config, result))
            if result.ok:
                study.tell(trial, result.latency_us)
            else:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
        return history
