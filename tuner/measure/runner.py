"""Live runner: checks a config against its family's float64 reference, then times it (CUDA,
interpreter). The family (`tuner.kernels.registry`) gives the problem's tensors and the launch."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import partial

from tuner.core import OUT_DTYPES, TrialStatus
from tuner.kernels.config import KernelConfig
from tuner.kernels.registry import DEFAULT_FAMILY, get_family
from tuner.kernels.shape import Shape, as_block_shape
from tuner.measure.timing import (
    ESTIMATE_LAUNCHES,
    REP_S,
    WARMUP_S,
    CudaEventTimer,
    Sampler,
    Timer,
    WallTimer,
    capture_graph,
    copies_for,
    cuda_plan,
    interpreter_plan,
    percentiles,
)
from tuner.measure.trial import TrialResult

# Relative Frobenius error a bf16 output must stay under: bf16 keeps 8 significant bits (a
# relative step of 2^-8, about 4e-3), so 1e-2 passes a correct FP8 product and fails a wrong
# tile or scale.
REL_TOL = 1e-2
# Prepared timings (copies' order, captured graphs) kept per runner: enough for the configs
# re-timed together before a winner is declared (tuner.measure.noise: RETIME_TOP plus the default).
KEPT_SAMPLERS = 8


@dataclass(frozen=True)
class Problem:
    """One GEMM to tune: for the dense family C[M, N] = A[M, K] @ B[N, K]^T with block-FP8
    scales; another family reads its own dimensions from `params`.

    Attributes:
        M: rows of A (tokens in the batch).
        N: rows of the weight B.
        K: reduction dimension.
        block_shape: [group_n, group_k] of the weight scales.
        out_dtype: "bfloat16" (serving) or "float16" (vLLM's tuning script default).
        family: the kernel family's name (`tuner.kernels.registry`).
        params: the family's other dimensions (`tuner.kernels.shape.Shape.params`).
        kernel: whose kernel to time, "builtin" or "vllm" (`KernelFamily.source`).
    """

    M: int
    N: int
    K: int
    block_shape: tuple[int, int] | None = (128, 128)
    out_dtype: str = "bfloat16"
    family: str = DEFAULT_FAMILY
    params: tuple[tuple[str, int], ...] = ()
    kernel: str = "builtin"

    @property
    def shape(self) -> Shape:
        """The problem apart from M."""
        return Shape(self.N, self.K, as_block_shape(self.block_shape), self.params)


def summarize_us(samples_s: Sequence[float]) -> tuple[float, float, float]:
    """Median, 20th and 80th percentile of wall-clock samples, converted to microseconds.

    Args:
        samples_s: at least one duration in seconds.

    Returns:
        (median_us, p20_us, p80_us); a single sample gives the same value three times.

    Raises:
        ValueError: no samples.
    """
    return percentiles([sample * 1e6 for sample in samples_s])


def classify_error(exc: BaseException) -> TrialStatus:
    """Map an exception raised by compiling or launching the kernel to a trial status.

    ptxas failing on the kernel's PTX is a compile error too (`PTXASError`, raised by the NVIDIA
    backend's `make_cubin` in Triton 3.6 and 3.9, triton/runtime/errors.py): not a crash, which
    on CUDA would restart the worker for a config that never ran.
    """
    from triton.compiler.errors import CompilationError
    from triton.runtime import errors

    if isinstance(exc, errors.OutOfResources):
        return TrialStatus.OUT_OF_RESOURCES
    ptxas_error = getattr(errors, "PTXASError", CompilationError)
    if isinstance(exc, CompilationError | ptxas_error):
        return TrialStatus.COMPILE_ERROR
    return TrialStatus.CRASHED


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"[:500]


class KernelRunner:
    """Answers `evaluate(config)` for one Problem by running the real kernel.

    Inputs and the float64 reference are made once. Each config is first run into an output
    poisoned with NaN and checked against the reference (relative Frobenius error below
    `REL_TOL`, every element written); only then is it timed, as `time_us` describes: weight
    copies rotated so B is not L2-resident, launches replayed from a CUDA graph, median and
    20th/80th percentiles of the per-launch time. On `device="cpu"` (TRITON_INTERPRET=1
    set before triton was imported) the same loop runs eagerly on a wall clock; those are CPU
    timings of the interpreter, not GPU ones.

    Args:
        problem: the GEMM to tune.
        device: where it runs (`Runner.torch_device`): "cuda", or "cpu" for Triton's
            interpreter.
        seed: seed of the random inputs.
        interpreter_reps: timed samples per config on the interpreter.
        clock: wall clock in seconds for the interpreter, replaceable in tests.
        warmup_s: seconds of untimed graph replays per config before its samples (CUDA).
        rep_s: seconds of timed graph replays per config (CUDA).
        timer: clock of the timed region; CUDA events on "cuda", `WallTimer(clock)` on the
            interpreter when None.

    Raises:
        ValueError: unknown device or out_dtype.
    """

    def __init__(
        self,
        problem: Problem,
        *,
        device: str,
        seed: int = 0,
        interpreter_reps: int = 3,
        clock: Callable[[], float] = time.perf_counter,
        warmup_s: float = WARMUP_S,
        rep_s: float = REP_S,
        timer: Timer | None = None,
    ) -> None:
        import torch

        if device not in ("cuda", "cpu"):
            raise ValueError(f"device must be 'cuda' or 'cpu', got {device!r}")
        if problem.out_dtype not in OUT_DTYPES:
            raise ValueError(f"out_dtype must be one of {OUT_DTYPES}, got {problem.out_dtype!r}")
        self.problem = problem
        self.interpreter_reps = interpreter_reps
        self.clock = clock
        self.warmup_s = warmup_s
        self.rep_s = rep_s
        self._torch = torch
        self.family = get_family(problem.family)
        self.device = device
        self.on_gpu = self.device != "cpu"
        source = self.family.source(problem.kernel)
        self.workload = source.workload(problem.shape, problem.M, seed=seed, device=self.device)
        self.out_dtype = getattr(torch, problem.out_dtype)
        self.reference = self.workload.reference(self.out_dtype)
        self.timer = timer
        # Copy 0 is the input weight itself; more copies are cloned when a plan asks for them.
        self.weights = [self.workload.weights()]
        self._timed_out = None  # the output every timed launch writes into
        self._samplers: OrderedDict[KernelConfig, Sampler] = OrderedDict()
        self._stream = None

    def _launch(self, config: KernelConfig, out=None):
        return self.workload.launch(config, self.weights[0], out=out, out_dtype=self.out_dtype)

    def check(self, config: KernelConfig) -> TrialResult:
        """Run once into a NaN-poisoned output and compare with the reference.

        Returns:
            `ok` with rel_error when every element was written and the error is below REL_TOL;
            otherwise `wrong_result` or the launch failure's status, with the reason.
        """

        from tuner.kernels.accuracy import relative_error  # imports torch: after the runner's pin

        torch = self._torch
        out = torch.full(
            self.workload.out_shape, float("nan"), dtype=self.out_dtype, device=self.device
        )
        try:
            self._launch(config, out=out)
            if self.on_gpu:
                torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - every launch failure becomes a recorded trial
            return TrialResult(classify_error(exc), error=_one_line(exc))
        unwritten = int(torch.isnan(out).sum())
        error = relative_error(out, self.reference)
        if unwritten:
            return TrialResult(
                TrialStatus.WRONG_RESULT,
                rel_error=error,
                error=f"{unwritten} output elements not written",
            )
        if not error < REL_TOL:
            return TrialResult(
                TrialStatus.WRONG_RESULT,
                rel_error=error,
                error=f"relative error {error:.3g} >= {REL_TOL:g}",
            )
        return TrialResult(TrialStatus.OK, rel_error=error)

    def time_us(self, config: KernelConfig) -> tuple[float, float, float]:
        """Time a config that already passed `check`, as serving runs it.

        Method: rotate copies of the weight, and replay a CUDA graph of several launches.
        - Weights not L2-resident: `copies_for` copies of the workload's weights (B [N, K] and
          Bs for the dense GEMM), at least 2 and together at least twice the L2 size
          (`L2_cache_size` of the device), are read in turn, so when a launch reads a copy, at
          least 2x L2 of other weights was read since its last use. We rotate instead of
          flushing L2 because (1) a flush between the launches of one graph would be timed
          with them, and keeping it out of the timed region means one
          replay per launch, which brings back the launch overhead the graph removes; (2) a
          flush also evicts A [M, K] and As, which in serving the activation-quantization kernel
          has just written right before this GEMM (vLLM quantizes activations per token group
          before the Triton GEMM), so they are often L2-resident then; rotation keeps only the
          weights cold, as in serving, where all the other layers' weights pass through L2
          between two uses of one layer's weights.
        - Launch overhead amortized: `launches` launches (cycling through the copies) are
          captured into one CUDA graph, as vLLM's decode runs under CUDA graphs; one sample is
          one replay timed with CUDA events, per-launch time = replay time / launches. When the
          copies outnumber the launches, several graphs take the copies in turn. Capture and
          warmup happen before, outside any timed region; there is no flush to keep out.
        - Repeats in do_bench's style: `tuner.measure.timing.cuda_plan` sizes one replay to about
          SAMPLE_S, warms up for warmup_s and takes rep_s of samples (at least MIN_SAMPLES).
        On the interpreter: the same loop with `interpreter_plan` (2 copies in turn, one eager
        launch per sample, interpreter_reps samples) on the wall clock; there are no graphs.

        Returns:
            (median_us, p20_us, p80_us): per-launch latency in microseconds.

        Raises:
            Exception: whatever launching or capturing raises (`evaluate` records it).
        """
        sampler = self._sampler(config)
        with self._on_stream():
            samples_s = sampler.samples_s()
        return summarize_us(samples_s)

    def sample_us(self, config: KernelConfig) -> float:
        """One more timing sample of a config that already passed `check`: microseconds per
        launch of one graph replay (CUDA) or one timed batch (interpreter), for interleaved
        re-timing (`tuner.measure.noise.retime_interleaved`). The config's graphs are kept between
        calls for the last KEPT_SAMPLERS configs, and rotation through the copies goes on.

        Raises:
            Exception: whatever launching or capturing raises.
        """
        sampler = self._sampler(config)
        with self._on_stream():
            return sampler.sample_s() * 1e6

    def _launch_copy(self, config: KernelConfig, copy: int) -> None:
        """Launch into the shared timing output, reading weight copy `copy`."""
        self.workload.launch(
            config, self.weights[copy], out=self._timed_out, out_dtype=self.out_dtype
        )

    def _ensure_copies(self, copies: int) -> None:
        """Clone the weight until there are `copies` copies; make the timing output."""
        torch = self._torch
        if self._timed_out is None:
            self._timed_out = torch.empty(
                self.workload.out_shape, dtype=self.out_dtype, device=self.device
            )
        while len(self.weights) < copies:
            self.weights.append(tuple(tensor.clone() for tensor in self.weights[0]))

    @contextmanager
    def _on_stream(self) -> Iterator[None]:
        """Run CUDA timing work on a side stream of its own, as torch asks before a capture."""
        if not self.on_gpu:
            yield
            return
        torch = self._torch
        if self._stream is None:
            self._stream = torch.cuda.Stream()
        with torch.cuda.stream(self._stream):
            yield

    def _sampler(self, config: KernelConfig) -> Sampler:
        """The config's sampler, warmed up; built (and the oldest dropped) when not kept."""
        if config in self._samplers:
            self._samplers.move_to_end(config)
            return self._samplers[config]
        with self._on_stream():
            sampler = self._build_cuda(config) if self.on_gpu else self._build_eager(config)
            sampler.warm()
        self._samplers[config] = sampler
        while len(self._samplers) > KEPT_SAMPLERS:
            self._samplers.popitem(last=False)
        return sampler

    def _build_eager(self, config: KernelConfig) -> Sampler:
        plan = interpreter_plan(self.interpreter_reps)
        self._ensure_copies(plan.copies)

        def run_batch(batch: int) -> None:
            for copy in plan.copy_order(batch):
                self._launch_copy(config, copy)

        return Sampler(plan, run_batch, self.timer or WallTimer(self.clock))

    def _build_cuda(self, config: KernelConfig) -> Sampler:
        torch = self._torch
        weights = self.weights[0]
        copy_bytes = sum(tensor.numel() * tensor.element_size() for tensor in weights)
        l2_bytes = torch.cuda.get_device_properties(weights[0].device).L2_cache_size
        first = copies_for(copy_bytes, l2_bytes)
        self._ensure_copies(first)
        timer = self.timer or CudaEventTimer()
        self._launch_copy(config, 0)  # loads the kernel before anything is captured or timed
        # The launch time the plan is sized with, from a small graph rather than eager launches:
        # an eager launch through Triton's Python launcher costs tens of microseconds of CPU,
        # more than a decode-size kernel runs, so eager timing measures the CPU and the plan
        # would put a few dozen launches in a graph; each replay's own start-up (the CPU
        # submitting the graph after the start event) would then weigh several percent.
        order = [i % first for i in range(ESTIMATE_LAUNCHES)]
        probe = capture_graph([partial(self._launch_copy, config, copy) for copy in order])
        probe.replay()  # the first replay uploads the graph
        timer.start()
        probe.replay()
        launch_s = max(timer.stop(), 1e-9) / ESTIMATE_LAUNCHES
        del probe
        plan = cuda_plan(
            copy_bytes=copy_bytes,
            l2_bytes=l2_bytes,
            launch_s=launch_s,
            warmup_s=self.warmup_s,
            rep_s=self.rep_s,
        )
        self._ensure_copies(plan.copies)
        graphs = [
            capture_graph(
                [partial(self._launch_copy, config, copy) for copy in plan.copy_order(batch)]
            )
            for batch in range(plan.batches)
        ]
        return Sampler(plan, lambda batch: graphs[batch].replay(), timer)

    def evaluate(self, config: KernelConfig) -> TrialResult:
        """Check, then time, one config; never raises for a config that fails.

        Returns:
            A TrialResult; `ok` with latency_us, p20_us, p80_us (microseconds) when the config
            ran and matched the reference, otherwise the failure's status and reason.
        """
        start = time.perf_counter()
        reason = self.family.why_invalid(config, self.problem.shape)
        if reason is not None:
            return TrialResult(TrialStatus.INVALID, error=reason, measure_s=0.0)
        checked = self.check(config)
        if checked.status is not TrialStatus.OK:
            return replace(checked, measure_s=time.perf_counter() - start)
        try:
            median_us, p20_us, p80_us = self.time_us(config)
        except Exception as exc:  # noqa: BLE001
            return TrialResult(
                classify_error(exc), error=_one_line(exc), measure_s=time.perf_counter() - start
            )
        return TrialResult(
            TrialStatus.OK,
            latency_us=median_us,
            p20_us=p20_us,
            p80_us=p80_us,
            rel_error=checked.rel_error,
            measure_s=time.perf_counter() - start,
        )
