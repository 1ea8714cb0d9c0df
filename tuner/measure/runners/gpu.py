"""The live GPU runner: trials checked and timed on one CUDA GPU per worker."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tuner.measure.runner import KernelRunner
from tuner.measure.runners.base import ProblemRunner, process_environment

if TYPE_CHECKING:
    from tuner.kernels.config import KernelConfig
    from tuner.measure.runner import Problem

# A searched trial on a GPU: about 25 ms of measuring (bench/README.md, tuner.run.task).
GPU_TRIAL_S = 0.025
# Compiling one config for a GPU: 0.6 s on one core (bench/README.md, compile pruning); the
# compile pool overlaps it with measuring.
GPU_COMPILE_S = 0.6


@dataclass(frozen=True)
class GpuRunner:
    """Measures on a CUDA GPU (`tuner.measure.runner.KernelRunner`), one worker per GPU.

    Attributes:
        device_name: vLLM's key of the GPU model, as the command resolved it.
    """

    device_name: str
    name = "cuda"
    torch_device = "cuda"
    default_trial_timeout_s = 300.0
    on_gpu = True
    family_environments = True
    confirm_above_s = None

    @classmethod
    def from_options(
        cls, *, device_name: str, landscape: str | None = None, interpreter_reps: int = 3
    ) -> GpuRunner:
        """The registry's factory (`tuner.measure.runners.registry.make_runner`); the landscape
        and the interpreter's reps do not apply."""
        return cls(device_name)

    def pin(self, visible_device: str | None) -> None:
        """Pin this process to one GPU (CUDA_VISIBLE_DEVICES), when one is named."""
        if visible_device is not None:
            os.environ["CUDA_VISIBLE_DEVICES"] = visible_device

    def environment(self, kernel: str, family: str) -> dict[str, str]:
        """The GPU's name, compute capability, CUDA and driver versions, and the kernel.

        Raises:
            ValueError: an unknown family or kernel choice.
        """
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

        return KernelRunner(
            problem, device=self.torch_device, seed=seed, warmup_s=warmup_s, rep_s=rep_s
        )

    def stored(self, task_id: int, config: KernelConfig) -> None:
        """Nothing to do."""

    def retime_rounds(self, rounds: int) -> int:
        """A GPU's rounds, as given."""
        return rounds

    def trial_model_s(self, N: int, K: int, M: int) -> float:
        """`GPU_TRIAL_S` whatever the shape."""
        return GPU_TRIAL_S

    def model_source(
        self, device_name: str, calibration: tuple[tuple[int, int, int], float] | None
    ) -> str:
        """The default measuring and compile times."""
        return (
            f"no earlier trials of {device_name} in the store: default "
            f"{GPU_TRIAL_S * 1000:.0f} ms of measuring a trial, compiles at "
            f"{GPU_COMPILE_S} s each on one core, overlapped"
        )

    def calibration(self) -> tuple[tuple[int, int, int], float] | None:
        """None: the model stands as it is."""
        return None

    def plan_notes(self) -> list[str]:
        """None."""
        return []


def _driver_version() -> str:
    if shutil.which("nvidia-smi") is None:
        return ""
    query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader", "-i", "0"]
    try:
        return subprocess.run(query, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
