"""The interpreter runner: trials checked and timed on the CPU with Triton's interpreter
(TRITON_INTERPRET=1), a development runner whose timings are CPU timings."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tuner.measure import calibrate
from tuner.measure.runner import KernelRunner
from tuner.measure.runners.base import ProblemRunner, process_environment

if TYPE_CHECKING:
    from tuner.kernels.config import KernelConfig
    from tuner.measure.runner import Problem

# On the interpreter a plan estimated longer than this asks for --yes (an hour).
CONFIRM_ABOVE_S = 3600.0
# The interpreter's cost model, in seconds per trial: INTERPRETER_TRIAL_S plus, per kernel call
# (the correctness check and --interpreter-reps timed calls), INTERPRETER_S_PER_WORK * N * K *
# ceil(M / 64). Fitted to interpreter runs on a 2-core host (about 0.1 s a call for M=64, N=512,
# K=1024; 3 s for M=1 at N=5120, K=3072), a field report (about 37 s a trial for qwen3.8-27b at
# M=1) and the README's `tiny` sweep on 2 cores (0.4-1.1 s a trial at N*K of 1e5: the fixed part).
INTERPRETER_TRIAL_S = 0.7
INTERPRETER_S_PER_WORK = 0.1 / (512 * 1024)


def interpreter_work(N: int, K: int, M: int) -> int:
    """The interpreter's cost unit of one call at (N, K, M): N * K * ceil(M / 64)."""
    return N * K * math.ceil(M / 64)


@dataclass(frozen=True)
class InterpreterRunner:
    """Measures on the CPU with Triton's interpreter, in one worker.

    Attributes:
        device_name: the interpreter's key in the store (`tuner.inputs.devices`), which is
            also its gpu_name.
        reps: timed calls per trial (`KernelRunner`'s interpreter_reps).
    """

    device_name: str
    reps: int = 3
    name = "interpreter"
    torch_device = "cpu"
    default_trial_timeout_s = 1800.0
    on_gpu = False
    family_environments = True
    confirm_above_s = CONFIRM_ABOVE_S

    @classmethod
    def from_options(
        cls, *, device_name: str, landscape: str | None = None, interpreter_reps: int = 3
    ) -> InterpreterRunner:
        """The registry's factory (`tuner.measure.runners.registry.make_runner`); a landscape
        does not apply."""
        return cls(device_name, interpreter_reps)

    def pin(self, visible_device: str | None) -> None:
        """TRITON_INTERPRET=1, before triton is imported (triton.jit reads it then)."""
        os.environ["TRITON_INTERPRET"] = "1"

    def environment(self, kernel: str, family: str) -> dict[str, str]:
        """The versions and kernel; the device is the interpreter, no driver or CUDA.

        Raises:
            ValueError: an unknown family or kernel choice.
        """
        return {
            **process_environment(kernel, family),
            "gpu_name": self.device_name,
            "device_name": self.device_name,
        }

    def problem_runner(
        self, problem: Problem, *, seed: int, warmup_s: float, rep_s: float, task_id: int = 0
    ) -> ProblemRunner:
        """A `KernelRunner` on the interpreter, `reps` timed calls a trial."""

        return KernelRunner(
            problem,
            device=self.torch_device,
            seed=seed,
            interpreter_reps=self.reps,
            warmup_s=warmup_s,
            rep_s=rep_s,
        )

    def stored(self, task_id: int, config: KernelConfig) -> None:
        """Nothing to do."""

    def retime_rounds(self, rounds: int) -> int:
        """As many rounds as timed calls per trial (at least 2): CPU timings of a development
        runner, not a GPU's count."""
        return max(2, self.reps)

    def trial_model_s(self, N: int, K: int, M: int) -> float:
        """The fitted cost model: `INTERPRETER_TRIAL_S` plus the work of each call (the
        check and `reps` timed calls)."""
        return INTERPRETER_TRIAL_S + INTERPRETER_S_PER_WORK * interpreter_work(N, K, M) * (
            self.reps + 1
        )

    def model_source(
        self, device_name: str, calibration: tuple[tuple[int, int, int], float] | None
    ) -> str:
        """The trial measured here now, or the model's default at two shapes."""
        if calibration is not None:
            (N, K, M), measured_s = calibration
            return (
                f"no earlier trials of {device_name} in the store: scaled by a trial "
                f"measured here now, {measured_s:.2f} s at N={N}, K={K}, M={M}"
            )
        return (
            f"no earlier trials of {device_name} in the store: default "
            f"{self.trial_model_s(512, 1024, 64):.1f} s a trial at N=512, K=1024, M<=64, "
            f"{self.trial_model_s(5120, 3072, 1):.0f} s at N=5120, K=3072"
        )

    def calibration(self) -> tuple[tuple[int, int, int], float] | None:
        """Trials measured on this host now, in a child process (`tuner.measure.calibrate`):
        the CPU's speed and load vary several times between hosts and hours."""

        measured_s = calibrate.interpreter_trial_s(self.reps)
        return (calibrate.CALIBRATION_SHAPE, measured_s) if measured_s else None

    def plan_notes(self) -> list[str]:
        """Nothing compiles ahead, and the timings are CPU timings."""
        return [
            "on the interpreter nothing is compiled ahead (that is a GPU's cost) and "
            "the timings are CPU timings"
        ]
