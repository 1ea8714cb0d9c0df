"""The `Runner` protocol: what differs between the ways a sweep measures (a live GPU, Triton's
CPU interpreter, a recorded landscape); `tuner.measure.runners.registry` turns a runner's name
into one.

A runner is made in the process that starts a run and carried to every worker in its spec, so
it must pickle for the spawn start method: a frozen dataclass of plain values.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

import tuner
from tuner.kernels.registry import get_family

if TYPE_CHECKING:
    from tuner.kernels.config import KernelConfig
    from tuner.measure.runner import Problem
    from tuner.measure.trial import TrialResult


class ProblemRunner(Protocol):
    """Measures configs of one problem (`tuner.measure.runner.KernelRunner`, or recorded
    timings answering as it would)."""

    def evaluate(self, config: KernelConfig) -> TrialResult:
        """Check and time one config; every failure comes back as a trial's status."""
        ...

    def sample_us(self, config: KernelConfig) -> float:
        """One timing sample of a config that passed its check, in microseconds."""
        ...


@runtime_checkable
class Runner(Protocol):
    """One way of measuring, with everything a run needs to know of it.

    Attributes:
        name: the runner's name in the CLI and the registry ("cuda", "interpreter", "replay").
        device_name: vLLM's key of the device measured on.
        torch_device: where its tensors live ("cuda" or "cpu").
        default_trial_timeout_s: seconds a config may take (compile, check, timing) before
            its worker is killed, when the command gives no --trial-timeout.
        on_gpu: it measures on a CUDA GPU: one worker per matching GPU, each pinned with
            CUDA_VISIBLE_DEVICES; a crashed trial can break the CUDA context (the worker
            restarts); the GPU's ceilings are recorded; candidates compile ahead.
        family_environments: each family's trials are recorded with an environment of its
            own kernel's hash; False keeps one environment for all (a replay keeps the
            landscape's).
        confirm_above_s: a plan estimated longer than this asks for --yes; None never asks.
    """

    # Read-only: a runner is frozen, its class gives the constants.
    @property
    def name(self) -> str: ...

    @property
    def device_name(self) -> str: ...

    @property
    def torch_device(self) -> str: ...

    @property
    def default_trial_timeout_s(self) -> float: ...

    @property
    def on_gpu(self) -> bool: ...

    @property
    def family_environments(self) -> bool: ...

    @property
    def confirm_above_s(self) -> float | None: ...

    def pin(self, visible_device: str | None) -> None:
        """Set this (worker) process's environment before torch and triton are imported:
        CUDA_VISIBLE_DEVICES for a GPU, TRITON_INTERPRET=1 for the interpreter.

        Args:
            visible_device: the CUDA_VISIBLE_DEVICES value of the worker; None for none.
        """
        ...

    def environment(self, kernel: str, family: str) -> dict[str, str]:
        """What this process measures on, as `db.repo.get_or_create_environment` takes it
        (gpu_name, device_name, compute_capability, driver, cuda, versions, kernel fields;
        device_name is the one the command resolved and made the runner with).

        Args:
            kernel: "builtin" or "vllm", whose kernel the trials time.
            family: the kernel family whose kernel hash is recorded.

        Raises:
            ValueError: an unknown family, or a kernel choice this machine cannot run.
        """
        ...

    def problem_runner(
        self, problem: Problem, *, seed: int, warmup_s: float, rep_s: float, task_id: int = 0
    ) -> ProblemRunner:
        """The runner of one task's problem.

        Args:
            problem: what to measure.
            seed: the seed of the problem's random inputs.
            warmup_s: seconds of warm-up per timed config (live runners).
            rep_s: seconds of timed launches per config (live runners).
            task_id: the store's id of the task it measures for, 0 for none (a runner that
                logs its trials names it; the product's ignore it).
        """
        ...

    def stored(self, task_id: int, config: KernelConfig) -> None:
        """Told once the trial of `config` for task `task_id` is stored (nothing to do for
        the product's runners)."""
        ...

    def retime_rounds(self, rounds: int) -> int:
        """How many interleaved rounds re-time a task's finalists, given a GPU's `rounds`."""
        ...

    def trial_model_s(self, N: int, K: int, M: int) -> float:
        """The plan's default seconds per trial at (N, K, M), before any measured trial."""
        ...

    def model_source(
        self, device_name: str, calibration: tuple[tuple[int, int, int], float] | None
    ) -> str:
        """Where the plan's time comes from when the store has no trials of the device."""
        ...

    def calibration(self) -> tuple[tuple[int, int, int], float] | None:
        """((N, K, M), seconds) of a trial measured on this host now, which scales the plan's
        model where the store has no trials of the family; None where the model needs none
        (or the trial could not be measured)."""
        ...

    def plan_notes(self) -> list[str]:
        """Lines the plan adds about this way of measuring."""
        ...


def process_environment(kernel: str, family: str) -> dict[str, str]:
    """The facts every runner's environment shares: torch, triton and tuner versions and the
    kernel (`source_fields`), the device fields empty.

    Raises:
        ValueError: an unknown family or kernel choice.
    """
    import torch
    import triton

    return {
        "torch": torch.__version__,
        "triton": triton.__version__,
        "tuner": tuner.__version__,
        **source_fields(family, kernel),
        "driver": "",
        "cuda": "",
        "compute_capability": "",
    }


def source_fields(family: str, kernel: str) -> dict[str, str]:
    """The kernel a family's trials time, as the environment records it: its hash, source
    ("builtin" or "vllm") and vLLM's version (`KernelFamily.source`).

    Raises:
        ValueError: an unknown family, or a kernel choice this machine cannot run.
    """

    source = get_family(family).source(kernel)
    return {"kernel_hash": source.kernel_hash, "kernel_source": source.name, "vllm": source.version}
