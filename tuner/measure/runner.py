"""How a sweep measures: the live measurement of one config (`KernelRunner`: checked against
its family's float64 reference, then timed as serving runs it, CUDA graphs and events on a GPU,
a wall clock on Triton's CPU interpreter), and the ways of measuring behind one small interface
(`Runner`: a CUDA GPU, Triton's CPU interpreter, a recorded landscape), whose name is parsed
once (`make_runner`).

A runner is made in the process that starts a run and carried to every worker in its spec, so
it is a frozen dataclass of plain values (it pickles for the spawn start method).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, ClassVar

import tuner
from tuner.core import OUT_DTYPES, TrialStatus, error_line
from tuner.kernels.config import KernelConfig
from tuner.kernels.registry import DEFAULT_FAMILY, get_family
from tuner.kernels.shape import Shape, as_block_shape
from tuner.measure import noise
from tuner.measure.landscape import RecordedTimings, load_landscape
from tuner.measure.trial import TrialResult

# Relative Frobenius error a bf16 output must stay under: bf16 keeps 8 significant bits (a
# relative step of about 4e-3), so 1e-2 passes a correct FP8 product and fails a wrong tile.
REL_TOL = 1e-2
# Prepared timings (copies' order, captured graphs) kept per runner: the configs re-timed
# together before a winner is declared (RETIME_TOP plus the default) fit.
KEPT_SAMPLERS = 8


@dataclass(frozen=True)
class Problem:
    """One GEMM to tune: for the dense family C[M, N] = A[M, K] @ B[N, K]^T with block-FP8
    scales; another family reads its own dimensions from `params`.

    Attributes:
        M: rows of A (tokens); N: rows of the weight B; K: the reduction dimension.
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


def classify_error(exc: BaseException) -> TrialStatus:
    """The trial status of an exception from compiling or launching the kernel. ptxas failing
    (`PTXASError`, Triton 3.6 and 3.9, triton/runtime/errors.py) is a compile error, not a crash,
    which on CUDA would restart the worker for a config that never ran."""
    from triton.compiler.errors import CompilationError  # after the runner's pin
    from triton.runtime import errors

    if isinstance(exc, errors.OutOfResources):
        return TrialStatus.OUT_OF_RESOURCES
    if isinstance(exc, CompilationError | errors.PTXASError):
        return TrialStatus.COMPILE_ERROR
    return TrialStatus.CRASHED


def _failed(exc: BaseException, start: float | None = None) -> TrialResult:
    took = None if start is None else time.perf_counter() - start
    return TrialResult(classify_error(exc), error=error_line(exc, 500), measure_s=took)


class KernelRunner:
    """Answers `evaluate(config)` for one Problem by running the real kernel.

    Inputs and the float64 reference are made once. Each config first runs into an output
    poisoned with NaN and is checked against the reference (relative Frobenius error below
    REL_TOL, every element written); only then is it timed (`time_us`).

    Args:
        problem: the GEMM to tune.
        device: "cuda", or "cpu" for Triton's interpreter (TRITON_INTERPRET=1 set before triton
            was imported); the CPU timings are the interpreter's, not a GPU's.
        seed: seed of the random inputs.
        interpreter_reps: timed samples per config on the interpreter.
        warmup_s: seconds of untimed graph replays per config (CUDA).
        rep_s: seconds of timed graph replays per config (CUDA).
        timer: times the timed region; CUDA events, or `wall_timer()` on the interpreter,
            when None.

    Raises:
        ValueError: an unknown out_dtype.
    """

    def __init__(
        self,
        problem: Problem,
        *,
        device: str,
        seed: int = 0,
        interpreter_reps: int = 3,
        warmup_s: float = noise.WARMUP_S,
        rep_s: float = noise.REP_S,
        timer: noise.Timer | None = None,
    ) -> None:
        import torch  # after the runner's pin

        if problem.out_dtype not in OUT_DTYPES:
            raise ValueError(f"out_dtype must be one of {OUT_DTYPES}, got {problem.out_dtype!r}")
        self.problem, self.device, self.on_gpu = problem, device, device != "cpu"
        self.interpreter_reps, self.timer = interpreter_reps, timer
        self.warmup_s, self.rep_s = warmup_s, rep_s
        self._torch = torch
        self.family = get_family(problem.family)
        source = self.family.source(problem.kernel)
        self.workload = source.workload(problem.shape, problem.M, seed=seed, device=device)
        self.out_dtype = getattr(torch, problem.out_dtype)
        self.reference = self.workload.reference(self.out_dtype)
        self.weights = [self.workload.weights()]  # copy 0 is the input weight itself
        # the output every timed launch writes into
        self._timed_out = torch.empty_like(self.reference, dtype=self.out_dtype)
        self._samplers: OrderedDict[KernelConfig, noise.Sampler] = OrderedDict()
        # CUDA timing work runs on a side stream of its own, as torch asks before a capture;
        # `torch.cuda.stream(None)` does nothing on the interpreter.
        self._stream = torch.cuda.Stream() if self.on_gpu else None

    def check(self, config: KernelConfig) -> TrialResult:
        """Run once into a NaN-poisoned output and compare with the reference: `ok` with
        rel_error, else `wrong_result` or the launch failure's status, with the reason."""
        from tuner.kernels.accuracy import relative_error  # imports torch: after the pin

        torch = self._torch
        out = torch.full_like(self._timed_out, float("nan"))
        try:
            self._launch_copy(config, 0, out)
            if self.on_gpu:
                torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - every launch failure becomes a recorded trial
            return _failed(exc)
        unwritten = int(torch.isnan(out).sum())
        error = relative_error(out, self.reference)
        if unwritten:
            why = f"{unwritten} output elements not written"
        elif not error < REL_TOL:
            why = f"relative error {error:.3g} >= {REL_TOL:g}"
        else:
            return TrialResult(TrialStatus.OK, rel_error=error)
        return TrialResult(TrialStatus.WRONG_RESULT, rel_error=error, error=why)

    def time_us(self, config: KernelConfig) -> tuple[float, float, float]:
        """(median_us, p20_us, p80_us) per launch of a config that passed `check`, timed as
        serving runs it.

        - Weights not L2-resident: `copies_for` copies of the workload's weights (B and Bs),
          together at least twice L2, are read in turn. Rotation instead of an L2 flush: a
          flush inside a graph would be timed, and it would also evict A and As, which serving's
          activation quantization has just written (vLLM quantizes per token group right
          before the GEMM); only the weights are cold, as when all the other layers' weights
          pass through L2 between two uses of one layer's.
        - Launch overhead amortized: the launches of a sample are captured into one CUDA graph,
          as vLLM's decode runs; a sample is one replay timed with CUDA events, divided by its
          launches. Capture and warm-up happen before any timed region.
        - Repeats in do_bench's style (`cuda_plan`): warm up for warmup_s, then rep_s of
          samples. On the interpreter: `interpreter_plan`, eager launches on the wall clock.

        Raises:
            Exception: whatever launching or capturing raises (`evaluate` records it).
        """
        samples = self._sampler(config).plan.samples
        return noise.percentiles([self.sample_us(config) for _ in range(samples)])

    def sample_us(self, config: KernelConfig) -> float:
        """One more sample (microseconds per launch) of a config that passed `check`, for the
        interleaved re-timing; the last KEPT_SAMPLERS configs keep their graphs and rotation."""
        sampler = self._sampler(config)
        with self._torch.cuda.stream(self._stream):
            return sampler.sample_s() * 1e6

    def _launch_copy(self, config: KernelConfig, copy: int, out: Any = None) -> Any:
        """One launch on weight copy `copy` into `out` (the timed output when None)."""
        out = self._timed_out if out is None else out
        return self.workload.launch(config, self.weights[copy], out=out, out_dtype=self.out_dtype)

    def _ensure_copies(self, copies: int) -> None:
        while len(self.weights) < copies:
            self.weights.append(tuple(tensor.clone() for tensor in self.weights[0]))

    def _sampler(self, config: KernelConfig) -> noise.Sampler:
        """The config's sampler, warmed up; built (and the oldest dropped) when not kept."""
        if config in self._samplers:
            self._samplers.move_to_end(config)
            return self._samplers[config]
        with self._torch.cuda.stream(self._stream):
            sampler = self._build_cuda(config) if self.on_gpu else self._build_eager(config)
            sampler.warm()
        self._samplers[config] = sampler
        while len(self._samplers) > KEPT_SAMPLERS:
            self._samplers.popitem(last=False)
        return sampler

    def _build_eager(self, config: KernelConfig) -> noise.Sampler:
        plan = noise.interpreter_plan(self.interpreter_reps)
        self._ensure_copies(plan.copies)

        def run_batch(batch: int) -> None:
            for copy in plan.copy_order(batch):
                self._launch_copy(config, copy)

        return noise.Sampler(plan, run_batch, self.timer or noise.wall_timer())

    def _graph(self, config: KernelConfig, order) -> Any:
        return noise.capture_graph([partial(self._launch_copy, config, copy) for copy in order])

    def _build_cuda(self, config: KernelConfig) -> noise.Sampler:
        weights = self.weights[0]
        copy_bytes = sum(tensor.numel() * tensor.element_size() for tensor in weights)
        l2_bytes = self._torch.cuda.get_device_properties(weights[0].device).L2_cache_size
        first = noise.copies_for(copy_bytes, l2_bytes)
        self._ensure_copies(first)
        timer = self.timer or noise.cuda_timer
        self._launch_copy(config, 0)  # loads the kernel before anything is captured or timed
        # The launch time the plan is sized with comes from a small graph: an eager launch
        # through Triton's Python launcher costs more CPU than a decode-size kernel runs.
        probe = self._graph(config, [i % first for i in range(noise.ESTIMATE_LAUNCHES)])
        probe.replay()  # the first replay uploads the graph
        launch_s = max(timer(probe.replay), 1e-9) / noise.ESTIMATE_LAUNCHES
        del probe
        plan = noise.cuda_plan(copy_bytes, l2_bytes, launch_s, self.warmup_s, self.rep_s)
        self._ensure_copies(plan.copies)
        graphs = [self._graph(config, plan.copy_order(batch)) for batch in range(plan.batches)]
        return noise.Sampler(plan, lambda batch: graphs[batch].replay(), timer)

    def evaluate(self, config: KernelConfig) -> TrialResult:
        """Check, then time, one config; never raises for a config that fails.

        Returns:
            `ok` with latency_us, p20_us, p80_us (microseconds) and rel_error when the config
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
            return _failed(exc, start)
        took = time.perf_counter() - start
        return replace(checked, latency_us=median_us, p20_us=p20_us, p80_us=p80_us, measure_s=took)


# What measures configs of one problem: the live `KernelRunner`, or recorded timings answering
# as it (`evaluate` a config's trial, `sample_us` one more timing sample of an ok config).
ProblemRunner = KernelRunner | RecordedTimings


class Runner:
    """One way of measuring: a config's trial (`problem_runner`), the device it runs on
    (`environment`), the process it pins (`pin`). Planning and interface policy live with the
    sweep; the runner answers only what depends on how it measures (`retime_rounds`).

    Attributes:
        name: the runner's name in the CLI and the registry ("cuda", "interpreter", "replay").
        device_name: vLLM's key of the device measured on, as the command resolved it.
        on_gpu: it measures on a CUDA GPU (one worker per GPU, each pinned to it).
        reps: timed calls per trial on Triton's interpreter.
    """

    name: ClassVar[str]
    on_gpu: ClassVar[bool] = False
    device_name: str
    reps: int = 3

    def pin(self, visible_device: str | None) -> None:
        """Set this worker's environment before the kernel is imported: CUDA_VISIBLE_DEVICES
        on a GPU (`visible_device`, None for none), TRITON_INTERPRET=1 on the interpreter;
        nothing by default."""
        return None

    def environment(self, kernel: str, family: str) -> dict[str, str]:
        """The device and versions trials are recorded with, as
        `db.repo.get_or_create_environment` takes them; `kernel` is "builtin" or "vllm". By
        default: versions and the kernel (its hash, source "builtin" or "vllm", and vLLM's
        version: `KernelFamily.source`), the device named `device_name`, no driver or CUDA.

        Raises:
            ValueError: an unknown family, or a kernel choice this machine cannot run.
        """
        import torch  # after the runner's pin, like every torch and triton import here
        import triton

        source = get_family(family).source(kernel)
        return {
            "torch": torch.__version__,
            "triton": triton.__version__,
            "tuner": tuner.__version__,
            "kernel_hash": source.kernel_hash,
            "kernel_source": source.name,
            "vllm": source.version,
            "gpu_name": self.device_name,
            "device_name": self.device_name,
        } | dict.fromkeys(("driver", "cuda", "compute_capability"), "")

    def problem_runner(
        self, problem: Problem, *, seed: int, warmup_s: float, rep_s: float, task_id: int = 0
    ) -> ProblemRunner:
        """What measures `problem`'s configs (seeded inputs; warm-up and timed seconds per
        config on a GPU); `task_id` names the store's task for a runner that logs it. By
        default a `KernelRunner` on the GPU, or on the interpreter with `reps` timed calls."""
        return KernelRunner(
            problem,
            device="cuda" if self.on_gpu else "cpu",
            seed=seed,
            interpreter_reps=self.reps,
            warmup_s=warmup_s,
            rep_s=rep_s,
        )

    def retime_rounds(self, rounds: int) -> int:
        """Interleaved rounds that re-time a task's finalists, given a GPU's `rounds`: those,
        by default."""
        return rounds

    def stored(self, task_id: int, config: KernelConfig) -> None:
        """Told once the trial of `config` for task `task_id` is stored (a test's runner logs
        it; the product's do nothing)."""
        return None


def _driver_version() -> str:
    """The NVIDIA driver's version from nvidia-smi; "" without it."""
    query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader", "-i", "0"]
    try:
        return subprocess.run(query, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


@dataclass(frozen=True)
class GpuRunner(Runner):
    """Checks and times on one CUDA GPU per worker (`KernelRunner`: CUDA graphs and events)."""

    device_name: str
    name = "cuda"
    on_gpu = True

    def pin(self, visible_device: str | None) -> None:
        """Pin this process to one GPU (CUDA_VISIBLE_DEVICES), when one is named."""
        if visible_device is not None:
            os.environ["CUDA_VISIBLE_DEVICES"] = visible_device

    def environment(self, kernel: str, family: str) -> dict[str, str]:
        """The GPU's name, compute capability, CUDA and driver versions, and the kernel."""
        import torch

        major, minor = torch.cuda.get_device_capability()
        return super().environment(kernel, family) | {
            "gpu_name": torch.cuda.get_device_name(),
            "compute_capability": f"{major}.{minor}",
            "cuda": torch.version.cuda or "",
            "driver": _driver_version(),
        }


@dataclass(frozen=True)
class InterpreterRunner(Runner):
    """Checks and times on the CPU with Triton's interpreter (TRITON_INTERPRET=1), in one
    worker: a development runner whose timings are CPU timings.

    Attributes:
        device_name: the interpreter's key in the store, also its gpu_name.
        reps: timed calls per trial.
    """

    device_name: str
    reps: int = 3
    name = "interpreter"

    def pin(self, visible_device: str | None) -> None:
        """TRITON_INTERPRET=1, before triton is imported (triton.jit reads it then)."""
        os.environ["TRITON_INTERPRET"] = "1"

    def retime_rounds(self, rounds: int) -> int:
        """As many rounds as timed calls per trial (at least 2): CPU timings, not a GPU's."""
        return max(2, self.reps)


@dataclass(frozen=True)
class ReplayRunner(Runner):
    """Answers each task from the landscape file `landscape`, with no GPU (read once per
    process while unchanged); trials keep the landscape's recorded environment."""

    landscape: str
    device_name: str
    name = "replay"

    def environment(self, kernel: str, family: str) -> dict[str, str]:
        """The landscape's recorded environment, under its device_name, for every family.

        Raises:
            ValueError: the landscape file is unreadable or malformed.
        """
        landscape = load_landscape(self.landscape)
        return {**landscape.environment, "device_name": landscape.device_name}

    def problem_runner(
        self, problem: Problem, *, seed: int, warmup_s: float, rep_s: float, task_id: int = 0
    ) -> ProblemRunner:
        """The recorded timings of the problem's (N, K, M).

        Raises:
            KeyError: the landscape has no timings for that problem.
        """
        return load_landscape(self.landscape).runner(problem.N, problem.K, problem.M)


RunnerFactory = Callable[..., Runner]


def _replay(*, device_name: str, landscape: str, **_: object) -> Runner:
    return ReplayRunner(landscape, device_name)


# A runner's name -> the factory of its runner, called as `factory(device_name=...,
# landscape=..., interpreter_reps=...)`; a test wraps one by assigning its name here.
RUNNERS: dict[str, RunnerFactory] = {
    "cuda": lambda *, device_name, **_: GpuRunner(device_name),
    "interpreter": lambda *, device_name, interpreter_reps=3, **_: InterpreterRunner(
        device_name, interpreter_reps
    ),
    "replay": _replay,
}


def make_runner(
    name: str, *, device_name: str, landscape: str | None = None, interpreter_reps: int = 3
) -> Runner:
    """Parse a runner's name into its runner: the one place a name becomes behaviour.

    Args:
        name: "cuda", "interpreter" or "replay" (or a name added to `RUNNERS`).
        device_name: vLLM's key of the device measured on (`tuner.inputs.devices`).
        landscape: the landscape file a replay answers from (`tuner.cli.devices` names the
            replay runner only with one).
        interpreter_reps: timed calls per trial on the interpreter.
    """
    return RUNNERS[name](
        device_name=device_name, landscape=landscape, interpreter_reps=interpreter_reps
    )
