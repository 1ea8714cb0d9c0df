"""How a config is timed and its noise controlled: weight copies rotated so B is not
L2-resident, launches captured into CUDA graphs, do_bench-like warm-up and repeats, the median
and p20/p80 of the samples; then the best configs and the default re-timed interleaved, and a
winner kept only if it beats the runner-up by more than the measured spread."""

from __future__ import annotations

import functools
import gc
import itertools
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tuner.kernels.config import KernelConfig
from tuner.measure.trial import TrialResult

# Time budgets in the style of `triton.testing.do_bench` (warmup=25 ms, rep=100 ms, triton 3.x).
WARMUP_S = 0.025
REP_S = 0.100
# One sample (one graph replay) lasts about this long: its own start-up stays a small share,
# and REP_S still holds dozens of samples.
SAMPLE_S = 0.001
MIN_SAMPLES = 10  # p20 and p80 need a handful of samples on each side of the median
MAX_SAMPLES = 1000
MAX_LAUNCHES = 1000  # launches captured in one graph
# Launches (one small graph) that estimate a launch's duration before the plan is made
# (do_bench estimates from 5 eager calls).
ESTIMATE_LAUNCHES = 5
MIN_COPIES = 2
# Configs re-timed besides the default: the fastest three of a search.
RETIME_TOP = 3
# Samples per re-timed config: a multiple of 2, 3 and 4 (every config starts a round equally
# often), 2-3 samples beyond p20/p80 on each side; four configs cost some 50 ms on a GPU.
RETIME_ROUNDS = 12
KEPT_FASTEST, KEPT_DEFAULT, KEPT_SIMPLER = "fastest", "default", "simpler"


def percentiles(values: Sequence[float]) -> tuple[float, float, float]:
    """(median, p20, p80) of at least one value, in its unit; percentiles interpolate linearly
    (`statistics.quantiles`, method="inclusive", as numpy's default).

    Raises:
        statistics.StatisticsError (a ValueError): `values` is empty.
    """
    if len(values) == 1:
        return values[0], values[0], values[0]
    cuts = statistics.quantiles(values, n=5, method="inclusive")
    return statistics.median(values), cuts[0], cuts[3]


# Times one region of work: runs `work` and answers the seconds it took.
Timer = Callable[[Callable[[], object]], float]


def wall_timer(clock: Callable[[], float] = time.perf_counter) -> Timer:
    """A Timer on a wall clock (`clock`, seconds): for work done when the call returns."""

    def timed(work: Callable[[], object]) -> float:
        start = clock()
        work()
        return clock() - start

    return timed


def cuda_timer(work: Callable[[], object]) -> float:
    """A Timer on CUDA events recorded on the current stream: device time of the work."""
    import torch  # imported after the runner pinned its GPU

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    work()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3  # elapsed_time is in milliseconds


@dataclass(frozen=True)
class TimingPlan:
    """How a config is timed: launch i of batch b reads weight copy (b * launches + i) %
    copies; one of copies and launches is a multiple of the other, so every copy is read
    equally often and again only after all the others.

    Attributes:
        copies: copies of the weight B [N, K] and its scales Bs.
        launches: kernel launches per sample (one CUDA graph, or one timed batch).
        warmup: untimed batches before the first sample.
        samples: timed samples.
    """

    copies: int
    launches: int
    warmup: int
    samples: int

    @property
    def batches(self) -> int:
        """Distinct batches (graphs) that together read every copy."""
        return max(1, self.copies // self.launches)

    def copy_order(self, batch: int) -> tuple[int, ...]:
        """The copy read by each launch of `batch` (0 <= batch < batches)."""
        return tuple((batch * self.launches + i) % self.copies for i in range(self.launches))


def copies_for(copy_bytes: int, l2_bytes: int) -> int:
    """Copies of the weight (`copy_bytes` each: B fp8 plus Bs fp32) that together hold at least
    twice the L2 cache (`l2_bytes`, torch's `L2_cache_size`), and at least 2."""
    return max(MIN_COPIES, math.ceil(2 * l2_bytes / copy_bytes))


def cuda_plan(
    copy_bytes: int,
    l2_bytes: int,
    launch_s: float,
    warmup_s: float = WARMUP_S,
    rep_s: float = REP_S,
) -> TimingPlan:
    """The plan for timing one config on a GPU.

    launches = SAMPLE_S / launch_s (1 to MAX_LAUNCHES); copies from `copies_for`; the larger of
    the two rounded up to a multiple of the other; samples = rep_s over a sample's length
    (MIN_SAMPLES to MAX_SAMPLES); warmup = warmup_s over it, and at least one replay of every
    graph (a graph's first replay uploads it).

    Args:
        copy_bytes: bytes of one copy of B and Bs.
        l2_bytes: the device's L2 size in bytes.
        launch_s: estimated seconds of one launch (positive).
        warmup_s: seconds of untimed replays before timing.
        rep_s: seconds of timed replays.
    """
    copies = copies_for(copy_bytes, l2_bytes)
    launches = min(MAX_LAUNCHES, max(1, math.ceil(SAMPLE_S / launch_s)))
    if copies >= launches:
        copies = math.ceil(copies / launches) * launches
    else:
        launches = math.ceil(launches / copies) * copies
    sample_s = launches * launch_s
    samples = min(MAX_SAMPLES, max(MIN_SAMPLES, math.ceil(rep_s / sample_s)))
    warmup = max(max(1, copies // launches), math.ceil(warmup_s / sample_s))
    return TimingPlan(copies=copies, launches=launches, warmup=warmup, samples=samples)


def interpreter_plan(reps: int) -> TimingPlan:
    """On Triton's CPU interpreter: 2 copies read in turn, one launch per sample, `reps`
    samples, no warm-up (the correctness check already ran the config)."""
    return TimingPlan(copies=MIN_COPIES, launches=1, warmup=0, samples=reps)


class Sampler:
    """Runs a plan's batches in rotation (`run_batch(b)`: one graph replay, or the batch's eager
    launches) and times each with `timer`; nothing else runs in the timed region."""

    def __init__(self, plan: TimingPlan, run_batch: Callable[[int], None], timer: Timer) -> None:
        self.plan, self.run_batch, self.timer = plan, run_batch, timer
        self._batches = itertools.cycle(range(plan.batches))

    def warm(self) -> None:
        """Run plan.warmup batches, untimed."""
        for _ in range(self.plan.warmup):
            self.run_batch(next(self._batches))

    def sample_s(self) -> float:
        """Time the next batch; seconds per launch."""
        batch = next(self._batches)
        return self.timer(functools.partial(self.run_batch, batch)) / self.plan.launches


def capture_graph(launches: Sequence[Callable[[], object]]) -> Any:
    """Capture launches into one `torch.cuda.CUDAGraph` to replay later.

    The cyclic garbage collector is off during capture: collecting a compiled Triton kernel
    unloads its CUDA module, illegal while a stream is captured (`triton.testing.
    cuda_graph_without_gc`, triton 3.9). Launch the kernel once before, so it is not compiled
    inside the capture.
    """
    import torch

    graph = torch.cuda.CUDAGraph()
    collecting = gc.isenabled()
    gc.disable()
    try:
        with torch.cuda.graph(graph):
            for launch in launches:
                launch()
    finally:
        if collecting:
            gc.enable()
    return graph


@dataclass(frozen=True)
class Retime:
    """A config's interleaved re-timing: median, p20 and p80 in microseconds, of `rounds`."""

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
    """Re-time configs interleaved, one sample of each per round: A B C, B C A, C A B, ... so a
    slow drift of the clock or the GPU does not always land on the same config.

    Args:
        sample_us: one sample of a config in microseconds (`KernelRunner.sample_us`,
            `RecordedTimings.sample_us`); every config passed its check.
        configs: distinct configs, at least one.
        rounds: samples per config, at least 2.

    Returns:
        One Retime per config, in the order of `configs`.

    Raises:
        ValueError: no configs, a config twice, or rounds < 2.
    """
    if not configs or len(set(configs)) != len(configs) or rounds < 2:
        raise ValueError(f"cannot re-time {len(configs)} configs in {rounds} rounds")
    samples: dict[KernelConfig, list[float]] = {config: [] for config in configs}
    for round_ in range(rounds):
        first = round_ % len(configs)
        for config in (*configs[first:], *configs[:first]):
            samples[config].append(sample_us(config))
    return [Retime(c, *percentiles(samples[c]), rounds) for c in configs]


def select_for_retime(
    results: Mapping[KernelConfig, TrialResult], default: KernelConfig, *, top: int = RETIME_TOP
) -> list[KernelConfig]:
    """The configs to re-time for one (shape, M): vLLM's `default` first if its result is ok,
    then the `top` fastest ok configs (ties by KernelConfig order) other than it; empty if
    nothing is ok."""
    ok = sorted((result.latency_us, config) for config, result in results.items() if result.ok)
    head = [default] if default in results and results[default].ok else []
    return head + [config for _, config in ok[:top] if config != default]


def simplicity(config: KernelConfig) -> tuple[int, int, int, KernelConfig]:
    """Sort key, simplest first: fewer num_stages, fewer num_warps, a smaller tile
    BLOCK_SIZE_M * BLOCK_SIZE_N * BLOCK_SIZE_K, then KernelConfig order."""
    tile = config.BLOCK_SIZE_M * config.BLOCK_SIZE_N * config.BLOCK_SIZE_K
    return config.num_stages, config.num_warps, tile, config


@dataclass(frozen=True)
class Decision:
    """The winner of one (shape, M) after re-timing, and why it was kept.

    Attributes:
        config: the config kept; latency_us: its re-timed median.
        default_latency_us: the default's re-timed median (None if not re-timed).
        runner_up: the second fastest by median (None when one config was re-timed).
        spread_us: the measured spread (see `decide_winner`).
        kept: "fastest", "default" or "simpler"; note: one human line saying why.
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

    Fastest and runner-up are the first two by median (ties: KernelConfig order); the spread is
    the larger of their p80_us - p20_us. If runner-up - fastest > spread the fastest is kept;
    otherwise of the configs within the spread of the fastest the default is kept if among
    them, else the simplest (`simplicity`). A single config is kept as "fastest", its own
    p80_us - p20_us the spread.

    `retimes` are distinct and at least one (`retime_interleaved`'s).
    """
    ranked = sorted(retimes, key=lambda r: (r.latency_us, r.config))
    default_us = next((r.latency_us for r in retimes if r.config == default), None)
    fastest, runner_up = ranked[0], ranked[1] if len(ranked) > 1 else None
    spread_us = max(r.p80_us - r.p20_us for r in ranked[:2])
    margin_us = runner_up.latency_us - fastest.latency_us if runner_up else 0.0
    chosen, kept = fastest, KEPT_FASTEST
    if runner_up is None:
        note = f"only candidate; spread {spread_us:.1f} us"
    elif margin_us > spread_us:
        up = runner_up.config.short()
        note = f"beats runner-up {up} by {margin_us:.1f} us > spread {spread_us:.1f} us"
    else:
        tied = [r for r in ranked if r.latency_us - fastest.latency_us <= spread_us]
        defaults = [r for r in tied if r.config == default]
        chosen = defaults[0] if defaults else min(tied, key=lambda r: simplicity(r.config))
        kept = KEPT_DEFAULT if defaults else KEPT_SIMPLER
        how = "the default" if defaults else f"the simplest of {len(tied)} within the spread"
        note = (
            f"{fastest.config.short()} leads runner-up {runner_up.config.short()} by only "
            f"{margin_us:.1f} us <= spread {spread_us:.1f} us; kept {how}"
        )
    up_config = runner_up.config if runner_up else None
    return Decision(chosen.config, chosen.latency_us, default_us, up_config, spread_us, kept, note)
