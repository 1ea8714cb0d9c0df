"""How a run of workers holds its tasks: one frozen object made by the command that starts the
run (`RunOptions`) and carried to every worker in its spec. How they measure is their runner's
(`tuner.measure.runners`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tuner.run.preview import trial_model

if TYPE_CHECKING:
    from tuner.measure.runners import Runner

# Seconds a claimed task stays leased without a heartbeat; renewed every lease_s / 4.
DEFAULT_LEASE_S = 120.0


@dataclass(frozen=True)
class RunOptions:
    """How the workers of one run hold tasks; picklable for the spawn start method.

    Attributes:
        lease_s: seconds a claimed task stays leased without a heartbeat.
        trial_timeout_s: seconds one config may stay in flight before its worker is killed;
            None for the runner's default (`trial_timeout_for`).
    """

    lease_s: float = DEFAULT_LEASE_S
    trial_timeout_s: float | None = None

    def trial_timeout_for(self, runner: Runner) -> float:
        """`trial_timeout_s`, or the runner's default (`TrialModel.timeout_s`: 300 s on CUDA,
        1800 s on the slow CPU interpreter, 60 s when replaying) when None."""
        if self.trial_timeout_s is not None:
            return self.trial_timeout_s
        return trial_model(runner.name).timeout_s
