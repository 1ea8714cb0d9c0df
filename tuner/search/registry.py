"""The registry of search strategies (name -> strategy class) and the default search."""

from __future__ import annotations

from tuner.search.base import Strategy
from tuner.search.grid import GridStrategy
from tuner.search.guided import GuidedStrategy
from tuner.search.optuna_tpe import OptunaStrategy

# A new strategy: one module (a `Strategy` subclass) and one line here. `tuner sweep
# --strategy`'s choices and the HTTP API's schema are read from this dict.
STRATEGIES: dict[str, type[Strategy]] = {
    "grid": GridStrategy,
    "optuna": OptunaStrategy,
    "guided": GuidedStrategy,
}
# The default search of `tuner sweep`, `POST /sweeps` and `tuner verify --fix`: the strategy and
# budget that came closest to the exhaustive optimum in bench/search_quality.py and
# bench/peers.py (bench/README.md).
DEFAULT_STRATEGY = "guided"
DEFAULT_TRIALS = 128


def get_strategy(name: str) -> Strategy:
    """A new strategy by name.

    Raises:
        ValueError: unknown name (one line that lists the known ones).
    """
    try:
        return STRATEGIES[name]()
    except KeyError:
        raise ValueError(f"unknown strategy '{name}'; known: {', '.join(STRATEGIES)}") from None
