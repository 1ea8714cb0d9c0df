"""Noise control: re-time the best configs and the default interleaved, then keep a winner only
if it beats the runner-up by more than the measured spread."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from tuner.kernels.config import KernelConfig
from tuner.measure.timing import percentiles
from tuner.measure.trial import TrialResult

# Configs re-timed besides the default: the fastest three of a search.
RETIME_TOP = 3
# Samples per config in the re-timing. 12 rounds: every config starts a round equally often
# whether 2, 3 or 4 configs are re-timed (12 is a multiple of each), and p20/p80 of 12 samples
# rest on 2-3 samples beyond them on each side. At about 1 ms a sample on a GPU
# (tuner.measure.timing.SAMPLE_S) four configs cost some 50 ms, less than one trial's timing.
RETIME_ROUNDS = 12

KEPT_FASTEST = "fastest"
KEPT_DEFAULT = "default"
KEPT_SIMPLER = "simpler"


@dataclass(frozen=True)
class Retime:
    """A config's interleaved re-timing.

    Attributes:
        config: the config.
        latency_us: median of its samples, microseconds per launch.
        p20_us: 20th percentile of its samples, microseconds.
        p80_us: 80th percentile of its samples, microseconds.
        rounds: samples taken (one per round).
    """

    config: KernelConfig
    latency_us: float
    p20_us: float
    p80_us: float
    rounds: int


def retime_interleaved(
    sample_us: Callable[[KernelConfig], float],
    configs: Sequence[KernelConfig],
    *,
    rounds: int = RETIME_ROUNDS,
) -> list[Retime]:
    """Re-time configs interleaved, one sample of each per round: A B C, B C A, C A B, ...

    Each round starts one config later than the one before, so a slow drift of the clock or the
    GPU (temperature, other work) does not always land on the same config.

    Args:
        sample_us: one timing sample of a config in microseconds (`KernelRunner.sample_us`,
            `tuner.measure.landscape.RecordedTimings.sample_us`); every config must have
            passed the correctness check.
        configs: the configs, distinct, at least one.
        rounds: samples per config, at least 2.

    Returns:
        One Retime per config, in the order of `configs`.

    Raises:
        ValueError: no configs, a config twice, or rounds < 2; whatever sample_us raises.
    """
    if not configs:
        raise ValueError("no configs to re-time")
    if len(set(configs)) != len(configs):
        raise ValueError("a config is listed twice for re-timing")
    if rounds < 2:
        raise ValueError(f"re-timing needs at least 2 rounds, got {rounds}")
    samples: dict[KernelConfig, list[float]] = {config: [] for config in configs}
    count = len(configs)
    for round_ in range(rounds):
        first = round_ % count
        for config in (*configs[first:], *configs[:first]):
            samples[config].append(sample_us(config))
    retimes = []
    for config in configs:
        median_us, p20_us, p80_us = percentiles(samples[config])
        retimes.append(Retime(config, median_us, p20_us, p80_us, rounds))
    return retimes


def select_for_retime(
    results: Mapping[KernelConfig, TrialResult],
    default: KernelConfig,
    *,
    top: int = RETIME_TOP,
) -> list[KernelConfig]:
    """The configs to re-time for one (shape, M): the default, then the fastest ok configs.

    Args:
        results: every trial of the (shape, M), by config.
        default: vLLM's default config (`tuner.kernels.dense.space.default_config`).
        top: how many of the fastest to take, at least 1.

    Returns:
        The default first if its result is ok, then the `top` fastest ok configs by latency_us
        (ties broken by KernelConfig order), skipping the default; empty if nothing is ok.

    Raises:
        ValueError: top < 1.
    """
    if top < 1:
        raise ValueError(f"top must be at least 1, got {top}")
    ok = sorted((result.latency_us, config) for config, result in results.items() if result.ok)
    fastest = [config for _, config in ok[:top]]
    default_ok = default in results and results[default].ok
    head = [default] if default_ok else []
    return head + [config for config in fastest if config != default]


def simplicity(config: KernelConfig) -> tuple[int, int, int, KernelConfig]:
    """Sort key, simplest first: fewer num_stages, fewer num_warps, a smaller tile
    BLOCK_SIZE_M * BLOCK_SIZE_N * BLOCK_SIZE_K, then KernelConfig order."""
    tile = config.BLOCK_SIZE_M * config.BLOCK_SIZE_N * config.BLOCK_SIZE_K
    return config.num_stages, config.num_warps, tile, config


@dataclass(frozen=True)
class Decision:
    """The winner of one (shape, M) after re-timing, and why it was kept.

    Attributes:
        config: the config kept.
        latency_us: its re-timed median, microseconds.
        default_latency_us: the default config's re-timed median (None if not re-timed).
        runner_up: the second fastest by median (None when one config was re-timed).
        spread_us: the measured spread (see `decide_winner`), microseconds.
        kept: "fastest", "default" or "simpler".
        note: one human line saying why.
    """

    config: KernelConfig
    latency_us: float
    default_latency_us: float | None
    runner_up: KernelConfig | None
    spread_us: float
    kept: str
    note: str


def decide_winner(retimes: Sequence[Retime], default: KernelConfig) -> Decision:
    """Keep the fastest re-timed config only if it beats the runner-up by more than the noise.

    The fastest and the runner-up are the first two by median (ties: KernelConfig order). The
    spread is the larger of their two p80_us - p20_us. If runner-up median - fastest median >
    spread, the fastest is kept. Otherwise every config whose median is within the spread of the
    fastest (median - fastest median <= spread) counts as tied, and the default config is kept
    if it is among them, else the simplest of them by `simplicity`. A single config is kept as
    "fastest", with its own p80_us - p20_us as the spread.

    Args:
        retimes: results of `retime_interleaved`, distinct configs.
        default: vLLM's default config.

    Returns:
        The Decision.

    Raises:
        ValueError: no retimes, or a config twice.
    """
    if not retimes:
        raise ValueError("no re-timed configs to decide between")
    if len({r.config for r in retimes}) != len(retimes):
        raise ValueError("a config is re-timed twice")
    ranked = sorted(retimes, key=lambda r: (r.latency_us, r.config))
    default_latency_us = next((r.latency_us for r in retimes if r.config == default), None)
    fastest = ranked[0]
    if len(ranked) == 1:
        spread_us = fastest.p80_us - fastest.p20_us
        return Decision(
            fastest.config,
            fastest.latency_us,
            default_latency_us,
            None,
            spread_us,
            KEPT_FASTEST,
            f"only candidate; spread {spread_us:.1f} us",
        )
    runner_up = ranked[1]
    spread_us = max(fastest.p80_us - fastest.p20_us, runner_up.p80_us - runner_up.p20_us)
    margin_us = runner_up.latency_us - fastest.latency_us
    if margin_us > spread_us:
        return Decision(
            fastest.config,
            fastest.latency_us,
            default_latency_us,
            runner_up.config,
            spread_us,
            KEPT_FASTEST,
            f"beats runner-up {runner_up.config.short()} by {margin_us:.1f} us "
            f"> spread {spread_us:.1f} us",
        )
    tied = [r for r in ranked if r.latency_us - fastest.latency_us <= spread_us]
    within = (
        f"{fastest.config.short()} leads runner-up {runner_up.config.short()} by only "
        f"{margin_us:.1f} us <= spread {spread_us:.1f} us"
    )
    chosen = next((r for r in tied if r.config == default), None)
    if chosen is not None:
        kept, why = KEPT_DEFAULT, "kept the default"
    else:
        chosen = min(tied, key=lambda r: simplicity(r.config))
        kept, why = KEPT_SIMPLER, f"kept the simplest of {len(tied)} within the spread"
    return Decision(
        chosen.config,
        chosen.latency_us,
        default_latency_us,
        runner_up.config,
        spread_us,
        kept,
        f"{within}; {why}",
    )
