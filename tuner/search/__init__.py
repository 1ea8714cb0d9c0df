"""Search: strategies behind one interface (`base.Strategy`, registered by name in `registry`)
and warm starts. A strategy sees a runner only as the `evaluate` callable it is given. Imports
tuner.kernels and tuner.measure.trial (the outcome `evaluate` returns); never the store or a GPU.

The names below are re-exported lazily (PEP 562): `tuner.search.defaults`, which every CLI
command's options read, then costs no import of the strategies.
"""

from __future__ import annotations

import importlib
from typing import Any

# Public name -> the module that defines it.
_EXPORTS: dict[str, str] = {
    "Evaluate": "base",
    "History": "base",
    "Strategy": "base",
    "best": "base",
    "planned": "base",
    "DEFAULT_STRATEGY": "defaults",
    "DEFAULT_TRIALS": "defaults",
    "STRATEGIES": "registry",
    "get_strategy": "registry",
    "warm_start_configs": "warm_start",
    "warm_start_for_task": "warm_start",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tuner.search' has no attribute {name!r}")
    return getattr(importlib.import_module(f"tuner.search.{module}"), name)
