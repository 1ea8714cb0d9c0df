"""The A/B's order of runs and its verdict per metric.

Runs go in blocks whose arm order alternates (baseline, candidate | candidate, baseline | ...,
the A B B A design), so that a slow drift of the host costs both arms alike. Each block gives one
pair; the candidate/baseline ratio is the geometric mean of the blocks' ratios, and its interval
Student's t on their logarithms (the pairs' own spread, so noise widens it and drift that the
pairing cancels does not). The t quantile is scipy's (`scipy.special.stdtrit`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from scipy.special import stdtrit

BASELINE, CANDIDATE = "baseline", "candidate"
ARMS = (BASELINE, CANDIDATE)
FASTER, SLOWER, NOISE = "faster", "slower", "within noise"


def schedule(blocks: int) -> list[tuple[int, str]]:
    """(block, arm) in run order: A B, B A, A B, ... (A the baseline).

    Args:
        blocks: how many; each holds one run of each arm.
    """
    return [(b, arm) for b in range(blocks) for arm in (ARMS if b % 2 == 0 else ARMS[::-1])]


# A metric's unit is in its name: "_ms" latencies are better lower, "_tok_s" throughputs higher.
def higher_is_better(metric: str) -> bool:
    """Whether a larger value of `metric` is better (a throughput, not a latency)."""
    return not metric.endswith("_ms")


@dataclass(frozen=True)
class Estimate:
    """One metric of one workload, over the blocks.

    Attributes:
        metric: its name ("ttft_ms", ...).
        baseline, candidate: each arm's median over its runs.
        ratio: candidate / baseline, the geometric mean of the blocks' ratios.
        low, high: the ratio's confidence interval.
        drift: the baseline's median in the later half of the blocks over the earlier half's
            (1.0 = steady host).
        verdict: "faster", "slower" or "within noise" for the candidate.
    """

    metric: str
    baseline: float
    candidate: float
    ratio: float
    low: float
    high: float
    drift: float
    verdict: str


def estimate(
    metric: str,
    pairs: Sequence[tuple[float, float]],
    *,
    min_effect: float,
    confidence: float = 0.95,
) -> Estimate:
    """Compare the arms on one metric.

    The candidate is "faster" when the whole interval lies on the better side of 1 and the ratio
    is better by at least `min_effect`; "slower" likewise on the worse side; else "within
    noise".

    Args:
        metric: its name, whose unit says its direction (`higher_is_better`).
        pairs: (baseline, candidate) value of each block, in block order; at least 2, all > 0.
        min_effect: the smallest relative change that counts, e.g. 0.02.
        confidence: of the interval.

    Raises:
        ValueError: fewer than 2 pairs, or a value <= 0.
    """
    if len(pairs) < 2 or min(min(p) for p in pairs) <= 0:
        raise ValueError(f"{metric}: needs 2 or more blocks of positive values, got {pairs}")
    logs = [math.log(c / b) for b, c in pairs]
    n, mean = len(logs), statistics.fmean(logs)
    half = float(stdtrit(n - 1, (1 + confidence) / 2)) * statistics.stdev(logs) / math.sqrt(n)
    # The candidate's gain as a log: > 0 is better whatever the metric's direction.
    sign = 1 if higher_is_better(metric) else -1
    gain_low, gain_high = sorted((sign * (mean - half), sign * (mean + half)))
    verdict = NOISE
    if gain_low > 0 and sign * mean >= math.log1p(min_effect):
        verdict = FASTER
    elif gain_high < 0 and sign * mean <= -math.log1p(min_effect):
        verdict = SLOWER
    base = [b for b, _ in pairs]
    half_n = n // 2
    return Estimate(
        metric,
        baseline=statistics.median(base),
        candidate=statistics.median(c for _, c in pairs),
        ratio=math.exp(mean),
        low=math.exp(mean - half),
        high=math.exp(mean + half),
        drift=statistics.median(base[n - half_n :]) / statistics.median(base[:half_n]),
        verdict=verdict,
    )


def overall(verdicts: Iterable[str]) -> str:
    """An A/B's verdict from its metrics': slower when any is, else faster when any is, else
    within noise."""
    said = set(verdicts)
    return SLOWER if SLOWER in said else FASTER if FASTER in said else NOISE
