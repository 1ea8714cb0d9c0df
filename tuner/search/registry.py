"""The registry of search strategies: name -> strategy class."""

from __future__ import annotations

from tuner.search.base import Strategy
from tuner.search.grid import GridStrategy
from tuner.search.guided import GuidedStrategy
from tuner.search.ils import IteratedLocalStrategy
from tuner.search.local import LocalStrategy
from tuner.search.optuna_tpe import OptunaStrategy
from tuner.search.tpe_local import TpeLocalStrategy

# A new strategy: one module (a `Strategy` subclass) and one line here; the CLI's --strategy
# choices are read from this dict when a command runs (`tuner.cli.options.strategy_names`).
STRATEGIES: dict[str, type[Strategy]] = {
    "grid": GridStrategy,
    "optuna": OptunaStrategy,
    "local": LocalStrategy,
    "tpe+local": TpeLocalStrategy,
    "ils": IteratedLocalStrategy,
    "guided": GuidedStrategy,
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
