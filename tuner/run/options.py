"""How a run of workers measures and holds its tasks: one frozen object made by the command that
starts the run (`RunOptions`) and carried to every worker in its spec, with the test hooks
(`TrialHooks`) a test harness installs in the process that starts the run.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

# Seconds a claimed task stays leased without a heartbeat; renewed every lease_s / 4.
DEFAULT_LEASE_S = 120.0


@dataclass(frozen=True)
class TrialHooks:
    """What a test makes a worker do around each measurement; the default does nothing.

    Attributes:
        crash: `KernelConfig.short()` labels whose measurement is replaced by `os.abort()`,
            like a kernel that kills its process.
        hang: labels whose measurement never returns, like a hung kernel.
        measure_log: a file that gets one line `pid, start|done, task_id, label`
            (tab-separated) when a measurement starts and when its trial is stored; None for
            none.
        sleep_s: seconds slept before each measurement, so replayed trials (well under a
            millisecond) last long enough for concurrent workers to overlap.
    """

    crash: frozenset[str] = frozenset()
    hang: frozenset[str] = frozenset()
    measure_log: str | None = None
    sleep_s: float = 0.0

    def before(self, task_id: int, label: str) -> None:
        """Called as the measurement of the config `label` starts."""
        self._log("start", task_id, label)
        if self.sleep_s:
            time.sleep(self.sleep_s)
        if label in self.crash:
            os.abort()
        if label in self.hang:
            while True:
                time.sleep(3600)

    def after(self, task_id: int, label: str) -> None:
        """Called once the trial of `label` is stored."""
        self._log("done", task_id, label)

    def _log(self, event: str, task_id: int, label: str) -> None:
        if self.measure_log is None:
            return
        fd = os.open(self.measure_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:  # one write of one short line: appends from several processes do not interleave
            os.write(fd, f"{os.getpid()}\t{event}\t{task_id}\t{label}\n".encode())
        finally:
            os.close(fd)


# Seconds a config may take (compile, check, timing) before its worker is killed, per backend.
DEFAULT_TRIAL_TIMEOUT_S = {"cuda": 300.0, "interpreter": 1800.0, "replay": 60.0}


def default_trial_timeout_s(backend: str) -> float:
    """The per-trial timeout when none is given.

    Args:
        backend: "cuda", "interpreter" or "replay".

    Returns:
        300 s on CUDA, 1800 s on the (slow) CPU interpreter, 60 s when replaying.

    Raises:
        ValueError: unknown backend.
    """
    try:
        return DEFAULT_TRIAL_TIMEOUT_S[backend]
    except KeyError:
        raise ValueError(f"unknown backend {backend!r}") from None


_installed = TrialHooks()


def install_hooks(hooks: TrialHooks) -> None:
    """Make `hooks` the default of every `RunOptions` made after this in this process (a test
    harness's entry point calls it; the workers get the hooks through their spec)."""
    global _installed
    _installed = hooks


def installed_hooks() -> TrialHooks:
    """The hooks `install_hooks` set in this process; the do-nothing default otherwise."""
    return _installed


@dataclass(frozen=True)
class RunOptions:
    """How the workers of one run measure and hold tasks; picklable for the spawn start method.

    Attributes:
        interpreter_reps: timed calls per trial on the Triton interpreter.
        lease_s: seconds a claimed task stays leased without a heartbeat.
        trial_timeout_s: seconds one config may stay in flight before its worker is killed;
            None for the backend's default (`trial_timeout_for`).
        hooks: the test hooks (`installed_hooks()` when the options are made).
    """

    interpreter_reps: int = 3
    lease_s: float = DEFAULT_LEASE_S
    trial_timeout_s: float | None = None
    hooks: TrialHooks = field(default_factory=installed_hooks)

    def trial_timeout_for(self, backend: str) -> float:
        """`trial_timeout_s`, or the backend's default (`default_trial_timeout_s`) when None."""
        if self.trial_timeout_s is not None:
            return self.trial_timeout_s
        return default_trial_timeout_s(backend)
