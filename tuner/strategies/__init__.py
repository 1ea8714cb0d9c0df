"""Search strategies behind one interface, and a registry from name to strategy."""

from __future__ import annotations

from tuner.strategies.base import Evaluate, History, Strategy, best
from tuner.strategies.defaults import DEFAULT_STRATEGY, DEFAULT_TRIALS
from tuner.strategies.grid import GridStrategy
from tuner.strategies.hybrid import TpeLocalStrategy
from tuner.strategies.local import LocalStrategy
from tuner.strategies.optuna_tpe import OptunaStrategy
from tuner.strategies.warm_start import warm_start_configs, warm_start_for_task

STRATEGIES: dict[str, type] = {
    "grid": GridStrategy,
    "optuna": OptunaStrategy,
    "local": LocalStrategy,
    "tpe+local": TpeLocalStrategy,
}


def get_strategy(name: str) -> Strategy:
    """A new strategy by name.

    Raises:
        ValueError: unknown name (the message lists the known ones).
    """
    try:
        return STRATEGIES[name]()
    except KeyError:
        raise ValueError(f"unknown strategy '{name}'; known: {', '.join(STRATEGIES)}") from None


__all__ = ["DEFAULT_STRATEGY", "DEFAULT_TRIALS", "Evaluate", "History", "Strategy", "STRATEGIES",
           "best", "get_strategy", "warm_start_configs", "warm_start_for_task"]
