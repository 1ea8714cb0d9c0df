"""`python -m tests.cli.reversed_strategy ARGS...`: a program that registers a test-only
strategy, then runs the tuner's CLI (tests/cli/test_strategy_registration.py). `reverse`
measures the space from its end, ignoring warm starts, so its trials tell it apart from every
builtin. Spawned workers import this module again as their parent's main module, so they
register it too."""

from __future__ import annotations

import sys

from tuner.search.base import Strategy
from tuner.search.registry import STRATEGIES


class ReverseStrategy(Strategy):
    """The first `budget` configs of the space, from its end."""

    name = "reverse"

    def search(self, evaluate, *, space, budget, seed, warm_start=()):
        return [(config, evaluate(config)) for config in list(reversed(space))[:budget]]


STRATEGIES[ReverseStrategy.name] = ReverseStrategy

if __name__ == "__main__":
    from tuner.cli.app import main

    sys.argv[0] = "tuner"
    main()
