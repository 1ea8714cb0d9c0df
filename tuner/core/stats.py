"""Summary statistics the comparisons share."""

from __future__ import annotations

import math
from collections.abc import Sequence


def geomean(values: Sequence[float]) -> float:
    """Geometric mean of positive values, e.g. of speedup ratios.

    Args:
        values: at least one positive number.

    Returns:
        exp(mean(log(v))).

    Raises:
        ValueError: a value is not positive.
        ZeroDivisionError: `values` is empty.
    """
    return math.exp(sum(math.log(v) for v in values) / len(values))
