"""Search: strategies behind one interface (`base.Strategy`, registered by name in `registry`),
warm starts, and the replay runner that answers trials from recorded landscapes. Imports
tuner.kernels and tuner.measure.trial (the outcome `evaluate` returns); never the store or a GPU.
"""

from tuner.search.base import Evaluate, History, Strategy, best, planned
from tuner.search.defaults import DEFAULT_STRATEGY, DEFAULT_TRIALS
from tuner.search.registry import STRATEGIES, get_strategy
from tuner.search.warm_start import warm_start_configs, warm_start_for_task

__all__ = ["DEFAULT_STRATEGY", "DEFAULT_TRIALS", "Evaluate", "History", "Strategy", "STRATEGIES",
           "best", "get_strategy", "planned", "warm_start_configs", "warm_start_for_task"]
