"""Serving-like timing: rotating weight copies, several launches per sample, a replaceable clock."""

from __future__ import annotations

import gc
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

# Time budgets in the style of `triton.testing.do_bench` (warmup=25 ms, rep=100 ms, triton 3.x).
WARMUP_S = 0.025
REP_S = 0.100
# One sample (one graph replay) should last about this long: long enough that the replay's own
# start-up (a few microseconds on the device) is a small share of it, short enough that REP_S
# still holds dozens of samples.
SAMPLE_S = 0.001
MIN_SAMPLES = 10  # p20 and p80 need a handful of samples on each side of the median
MAX_SAMPLES = 1000
MAX_LAUNCHES = 1000  # launches captured in one graph
# Launches (one small graph) that estimate a launch's duration before the plan is made
# (do_bench estimates from 5 eager calls).
ESTIMATE_LAUNCHES = 5
MIN_COPIES = 2


def percentiles(values: Sequence[float]) -> tuple[float, float, float]:
    """Median, 20th and 80th percentile of some values, in their own unit.

    Percentiles interpolate linearly between order statistics (`statistics.quantiles` with
    method="inclusive", as numpy's default).

    Args:
        values: at least one number.

    Returns:
        (median, p20, p80); a single value gives that value three times.

    Raises:
        ValueError: `values` is empty.
    """
    if not values:
        raise ValueError("no samples to summarize")
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0], ordered[0], ordered[0]
    cuts = statistics.quantiles(ordered, n=5, method="inclusive")
    return statistics.median(ordered), cuts[0], cuts[3]


class Timer(Protocol):
    """Times one region of work: `start()`, run the work, then `stop()`."""

    def start(self) -> None:
        """Mark the start of the timed region."""

    def stop(self) -> float:
        """Wait until the work issued since `start()` has finished; seconds it took."""


class WallTimer:
    """Timer on a wall clock; right for work that is done when the call returns (the interpreter).

    Args:
        clock: seconds, monotonic; `time.perf_counter` unless a test passes a fake.
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self._start = 0.0

    def start(self) -> None:
        self._start = self.clock()

    def stop(self) -> float:
        return self.clock() - self._start


class CudaEventTimer:
    """Timer on CUDA events recorded on the current stream: device time of the work in between."""

    def __init__(self) -> None:
        import torch

        self._torch = torch
        self._start: Any = None

    def start(self) -> None:
        self._start = self._torch.cuda.Event(enable_timing=True)
        self._start.record()

    def stop(self) -> float:
        end = self._torch.cuda.Event(enable_timing=True)
        end.record()
        end.synchronize()
        return self._start.elapsed_time(end) / 1e3  # elapsed_time is in milliseconds


@dataclass(frozen=True)
class TimingPlan:
    """How a config is timed: which weight copy each launch reads, and how often.

    Launch i of batch b reads copy (b * launches + i) % copies. `copies` and `launches` are such
    that one is a multiple of the other, so every copy is read equally often and, batches run in
    rotation, the same copy is read again only after all the other copies were read.

    Attributes:
        copies: copies of the weight B [N, K] and its scales Bs.
        launches: kernel launches per sample (one CUDA graph, or one timed batch).
        warmup: untimed batches run before the first sample.
        samples: timed samples.
    """

    copies: int
    launches: int
    warmup: int
    samples: int

    def __post_init__(self) -> None:
        if min(self.copies, self.launches, self.samples) < 1 or self.warmup < 0:
            raise ValueError(f"bad timing plan {self}")
        if self.copies % self.launches and self.launches % self.copies:
            raise ValueError(
                f"copies={self.copies} and launches={self.launches}: neither is a "
                "multiple of the other"
            )

    @property
    def batches(self) -> int:
        """Distinct batches (graphs) that together read every copy."""
        return max(1, self.copies // self.launches)

    def copy_order(self, batch: int) -> tuple[int, ...]:
        """The copy index read by each launch of `batch` (0 <= batch < batches)."""
        if not 0 <= batch < self.batches:
            raise ValueError(f"batch {batch} not in [0, {self.batches})")
        return tuple((batch * self.launches + i) % self.copies for i in range(self.launches))


def copies_for(copy_bytes: int, l2_bytes: int) -> int:
    """Copies of the weight that together hold at least twice the L2 cache (and at least 2).

    Args:
        copy_bytes: bytes of one copy: B [N, K] fp8 plus Bs fp32.
        l2_bytes: the device's L2 size (`torch.cuda.get_device_properties(d).L2_cache_size`).

    Raises:
        ValueError: copy_bytes is not positive or l2_bytes is negative.
    """
    if copy_bytes <= 0 or l2_bytes < 0:
        raise ValueError(f"bad sizes copy_bytes={copy_bytes} l2_bytes={l2_bytes}")
    return max(MIN_COPIES, math.ceil(2 * l2_bytes / copy_bytes))


def cuda_plan(
    *,
    copy_bytes: int,
    l2_bytes: int,
    launch_s: float,
    warmup_s: float = WARMUP_S,
    rep_s: float = REP_S,
) -> TimingPlan:
    """The plan for timing one config on a GPU.

    launches per sample = SAMPLE_S / launch_s (1 to MAX_LAUNCHES); copies from `copies_for`; then
    the larger of copies and launches is rounded up to a multiple of the smaller (see TimingPlan);
    samples = rep_s over a sample's length (MIN_SAMPLES to MAX_SAMPLES); warmup = warmup_s over a
    sample's length, and at least one replay of every graph (a graph's first replay uploads it).

    Args:
        copy_bytes: bytes of one copy of B and Bs.
        l2_bytes: the device's L2 size in bytes.
        launch_s: estimated seconds of one launch (positive; an overestimate only makes
            samples shorter).
        warmup_s: seconds of untimed replays before timing.
        rep_s: seconds of timed replays.

    Raises:
        ValueError: a size or duration is not positive.
    """
    if not launch_s > 0 or warmup_s < 0 or not rep_s > 0:
        raise ValueError(f"bad durations launch_s={launch_s} warmup_s={warmup_s} rep_s={rep_s}")
    copies = copies_for(copy_bytes, l2_bytes)
    launches = min(MAX_LAUNCHES, max(1, math.ceil(SAMPLE_S / launch_s)))
    if copies >= launches:
        copies = math.ceil(copies / launches) * launches
    else:
        launches = math.ceil(launches / copies) * copies
    sample_s = launches * launch_s
    samples = min(MAX_SAMPLES, max(MIN_SAMPLES, math.ceil(rep_s / sample_s)))
    batches = max(1, copies // launches)
    warmup = max(batches, math.ceil(warmup_s / sample_s))
    return TimingPlan(copies=copies, launches=launches, warmup=warmup, samples=samples)


def interpreter_plan(reps: int) -> TimingPlan:
    """The plan on Triton's CPU interpreter: 2 copies read in turn, one launch per sample.

    There is no GPU L2 to keep cold and no graph; the copies are still rotated so the same code
    path runs. `reps` samples, no warmup (the correctness check already ran the config).

    Raises:
        ValueError: reps < 1.
    """
    if reps < 1:
        raise ValueError(f"interpreter reps must be >= 1, got {reps}")
    return TimingPlan(copies=MIN_COPIES, launches=1, warmup=0, samples=reps)


class Sampler:
    """Runs a plan's batches in rotation and times them, one batch per sample.

    Only `run_batch` between the timer's `start` and `stop` is timed; building copies, capturing
    graphs and warming up happen before, outside any timed region.

    Args:
        plan: the timing plan.
        run_batch: runs batch b (0 <= b < plan.batches): one graph replay, or plan.launches
            eager launches over `plan.copy_order(b)`.
        timer: the clock of the timed region.
    """

    def __init__(self, plan: TimingPlan, run_batch: Callable[[int], None], timer: Timer) -> None:
        self.plan = plan
        self.run_batch = run_batch
        self.timer = timer
        self._next = 0

    def _advance(self) -> int:
        batch = self._next
        self._next = (batch + 1) % self.plan.batches
        return batch

    def warm(self) -> None:
        """Run plan.warmup batches, untimed."""
        for _ in range(self.plan.warmup):
            self.run_batch(self._advance())

    def sample_s(self) -> float:
        """Time the next batch; seconds per launch (batch time / plan.launches)."""
        batch = self._advance()
        self.timer.start()
        self.run_batch(batch)
        return self.timer.stop() / self.plan.launches

    def samples_s(self) -> list[float]:
        """plan.samples samples in a row, seconds per launch each."""
        return [self.sample_s() for _ in range(self.plan.samples)]


def capture_graph(launches: Sequence[Callable[[], object]]) -> Any:
    """Capture eager launches into one CUDA graph (`torch.cuda.CUDAGraph`), to replay later.

    Python's cyclic garbage collector is off during capture: collecting a Triton compiled kernel
    unloads its CUDA module, which is illegal while a stream is captured (the reason given in
    `triton.testing.cuda_graph_without_gc`, triton 3.9). Run at least one eager launch of the same
    kernel first, so compiling and loading it do not happen inside the capture.

    Args:
        launches: callables that each launch one kernel, allocating nothing.

    Returns:
        The captured graph.
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
