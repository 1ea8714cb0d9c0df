"""The replay runner: trials answered from a recorded landscape (`tuner.measure.landscape`),
with no GPU, for testing and for benchmarking searches."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tuner.measure.landscape import cached_landscape
from tuner.measure.runners.base import ProblemRunner

if TYPE_CHECKING:
    from tuner.kernels.config import KernelConfig
    from tuner.measure.runner import Problem

# A replayed trial: under a millisecond of worker CPU (bench/README.md, trial overhead).
REPLAY_TRIAL_S = 0.001


@dataclass(frozen=True)
class ReplayRunner:
    """Answers each task from the landscape file at `landscape` (read once per process while
    it is unchanged, `tuner.measure.landscape.cached_landscape`).

    Attributes:
        landscape: the landscape file.
        device_name: the landscape's device (trials keep its recorded environment).
    """

    landscape: str
    device_name: str
    name = "replay"
    torch_device = "cpu"
    default_trial_timeout_s = 60.0
    on_gpu = False
    family_environments = False
    confirm_above_s = None

    @classmethod
    def from_options(
        cls, *, device_name: str, landscape: str | None = None, interpreter_reps: int = 3
    ) -> ReplayRunner:
        """The registry's factory (`tuner.measure.runners.base.make_runner`).

        Raises:
            ValueError: no landscape file is named.
        """
        if landscape is None:
            raise ValueError("the replay runner needs a landscape file")
        return cls(str(landscape), device_name)

    def pin(self, visible_device: str | None) -> None:
        """Nothing to set: no kernel runs."""

    def environment(self, kernel: str, family: str) -> dict[str, str]:
        """The landscape's recorded environment, under its device_name (for every family).

        Raises:
            ValueError: the landscape file is unreadable or malformed.
        """

        landscape = cached_landscape(self.landscape)
        return {**landscape.environment, "device_name": landscape.device_name}

    def problem_runner(
        self, problem: Problem, *, seed: int, warmup_s: float, rep_s: float, task_id: int = 0
    ) -> ProblemRunner:
        """The landscape's recorded timings of the problem's (N, K, M).

        Raises:
            KeyError: the landscape has no timings for that problem.
        """

        return cached_landscape(self.landscape).runner(problem.N, problem.K, problem.M)

    def stored(self, task_id: int, config: KernelConfig) -> None:
        """Nothing to do."""

    def retime_rounds(self, rounds: int) -> int:
        """A GPU's rounds, as given (the samples are made up from the recorded spread)."""
        return rounds

    def trial_model_s(self, N: int, K: int, M: int) -> float:
        """`REPLAY_TRIAL_S` whatever the shape."""
        return REPLAY_TRIAL_S

    def model_source(
        self, device_name: str, calibration: tuple[tuple[int, int, int], float] | None
    ) -> str:
        """A replayed trial's cost."""
        return f"replayed: about {REPLAY_TRIAL_S * 1000:.0f} ms a trial"

    def calibration(self) -> tuple[tuple[int, int, int], float] | None:
        """None: the model stands as it is."""
        return None

    def plan_notes(self) -> list[str]:
        """None."""
        return []
