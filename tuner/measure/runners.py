"""The ways a sweep measures, behind one small protocol (`Runner`): a live CUDA GPU, Triton's
CPU interpreter, a recorded landscape; and the registry that parses a runner's name into one.

A runner is made in the process that starts a run and carried to every worker in its spec, so
it is a frozen dataclass of plain values (it pickles for the spawn start method).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import tuner
from tuner.kernels.config import KernelConfig
from tuner.kernels.registry import get_family
from tuner.measure.landscape import load_landscape
from tuner.measure.runner import KernelRunner, Problem
from tuner.measure.trial import TrialResult


class ProblemRunner(Protocol):
    """Measures configs of one problem (`KernelRunner`, or recorded timings answering as it)."""

    def evaluate(self, config: KernelConfig) -> TrialResult:
        """Check and time one config; every failure comes back as a trial's status."""
        ...

    def sample_us(self, config: KernelConfig) -> float:
        """One timing sample of a config that passed its check, in microseconds."""
        ...


@runtime_checkable
class Runner(Protocol):
    """One way of measuring: a config's trial, the device it runs on, the process it pins. The
    product's runners subclass it and take its defaults for `pin`, `retime_rounds` and `stored`.

    Attributes:
        name: the runner's name in the CLI and the registry ("cuda", "interpreter", "replay").
        device_name: vLLM's key of the device measured on, as the command resolved it.
        on_gpu: it measures on a CUDA GPU (one worker per GPU, each pinned to it).
    """

    name: str
    device_name: str
    on_gpu: bool

    def pin(self, visible_device: str | None) -> None:
        """Set this worker's environment before the kernel is imported: CUDA_VISIBLE_DEVICES
        on a GPU (`visible_device`, None for none), TRITON_INTERPRET=1 on the interpreter;
        nothing by default."""
        return None

    def environment(self, kernel: str, family: str) -> dict[str, str]:
        """The device and versions trials are recorded with, as
        `db.repo.get_or_create_environment` takes them; `kernel` is "builtin" or "vllm".

        Raises:
            ValueError: an unknown family, or a kernel choice this machine cannot run.
        """
        ...

    def problem_runner(
        self, problem: Problem, *, seed: int, warmup_s: float, rep_s: float, task_id: int = 0
    ) -> ProblemRunner:
        """What measures `problem`'s configs (seeded inputs; warm-up and timed seconds per
        config on a GPU); `task_id` names the store's task for a runner that logs it."""
        ...

    def retime_rounds(self, rounds: int) -> int:
        """Interleaved rounds that re-time a task's finalists, given a GPU's `rounds`: those,
        by default."""
        return rounds

    def stored(self, task_id: int, config: KernelConfig) -> None:
        """Told once the trial of `config` for task `task_id` is stored (a test's runner logs
        it; the product's do nothing)."""
        return None


def process_environment(kernel: str, family: str) -> dict[str, str]:
    """What every runner's environment shares: versions and the kernel (its hash, source
    "builtin" or "vllm", and vLLM's version: `KernelFamily.source`), device fields empty.

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
    } | dict.fromkeys(("driver", "cuda", "compute_capability"), "")


def _driver_version() -> str:
    if shutil.which("nvidia-smi") is None:
        return ""
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
        return {
            **process_environment(kernel, family),
            "gpu_name": torch.cuda.get_device_name(),
            "device_name": self.device_name,
            "compute_capability": f"{major}.{minor}",
            "cuda": torch.version.cuda or "",
            "driver": _driver_version(),
        }

    def problem_runner(
        self, problem: Problem, *, seed: int, warmup_s: float, rep_s: float, task_id: int = 0
    ) -> ProblemRunner:
        """A `KernelRunner` on the GPU."""
        return KernelRunner(problem, device="cuda", seed=seed, warmup_s=warmup_s, rep_s=rep_s)


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
    on_gpu = False

    def pin(self, visible_device: str | None) -> None:
        """TRITON_INTERPRET=1, before triton is imported (triton.jit reads it then)."""
        os.environ["TRITON_INTERPRET"] = "1"

    def environment(self, kernel: str, family: str) -> dict[str, str]:
        """The versions and kernel; the device is the interpreter, no driver or CUDA."""
        env = process_environment(kernel, family)
        return {**env, "gpu_name": self.device_name, "device_name": self.device_name}

    def problem_runner(
        self, problem: Problem, *, seed: int, warmup_s: float, rep_s: float, task_id: int = 0
    ) -> ProblemRunner:
        """A `KernelRunner` on the interpreter, `reps` timed calls a trial (it takes the GPU's
        warm-up and timing seconds too, as a test's stand-in runner reads them)."""
        return KernelRunner(
            problem,
            device="cpu",
            seed=seed,
            interpreter_reps=self.reps,
            warmup_s=warmup_s,
            rep_s=rep_s,
        )

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
    on_gpu = False

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


def _replay(*, device_name: str, landscape: str | None = None, **_: object) -> Runner:
    if landscape is None:
        raise ValueError("the replay runner needs a landscape file")
    return ReplayRunner(str(landscape), device_name)


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
        landscape: the landscape file a replay answers from.
        interpreter_reps: timed calls per trial on the interpreter.

    Raises:
        ValueError: an unknown name, or a replay without a landscape.
    """
    if name not in RUNNERS:
        raise ValueError(f"unknown runner {name!r} (known: {', '.join(sorted(RUNNERS))})")
    return RUNNERS[name](
        device_name=device_name, landscape=landscape, interpreter_reps=interpreter_reps
    )
