"""A runner that injects faults for tests (`FaultyRunner`): it wraps one of the product's
runners (`tuner.measure.runner`) and, around each measurement, logs it, sleeps, kills its
process or hangs. It pickles with the worker's spec, so a spawned worker measures with it."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from tuner.measure.runner import Runner, RunnerFactory


@dataclass(frozen=True)
class FaultyRunner:
    """`inner`, with faults around each measurement; the other members of `Runner` are inner's.

    Attributes:
        inner: the runner that measures.
        crash: `KernelConfig.short()` labels whose measurement is replaced by `os.abort()`,
            like a kernel that kills its process.
        hang: labels whose measurement never returns, like a hung kernel.
        measure_log: a file that gets one line `pid, start|done, task_id, label`
            (tab-separated) when a measurement starts and when its trial is stored; None for
            none.
        sleep_s: seconds slept before each measurement, so replayed trials (well under a
            millisecond) last long enough for concurrent workers to overlap.
    """

    inner: Runner
    crash: frozenset[str] = frozenset()
    hang: frozenset[str] = frozenset()
    measure_log: str | None = None
    sleep_s: float = 0.0

    @staticmethod
    def wrapping(factory: RunnerFactory, **faults) -> RunnerFactory:
        """A registry factory (`tuner.measure.runner.RUNNERS`) whose runners are
        `factory`'s with `faults` (this class's other attributes)."""

        def make(**options) -> FaultyRunner:
            return FaultyRunner(factory(**options), **faults)

        return make

    def __getattr__(self, name: str):
        """Every other member of `Runner` is inner's."""
        if name.startswith("__") or name == "inner":  # pickling looks some up before `inner`
            raise AttributeError(name)
        return getattr(self.inner, name)

    def problem_runner(self, problem, *, seed, warmup_s, rep_s, task_id=0):
        inner = self.inner.problem_runner(
            problem, seed=seed, warmup_s=warmup_s, rep_s=rep_s, task_id=task_id
        )
        return _FaultyProblem(self, inner, task_id)

    def stored(self, task_id, config):
        self._log("done", task_id, config.short())
        self.inner.stored(task_id, config)

    def before(self, task_id: int, label: str) -> None:
        """As the measurement of the config `label` starts: log, sleep, crash or hang."""
        self._log("start", task_id, label)
        if self.sleep_s:
            time.sleep(self.sleep_s)
        if label in self.crash:
            os.abort()
        if label in self.hang:
            while True:
                time.sleep(3600)

    def _log(self, event: str, task_id: int, label: str) -> None:
        if self.measure_log is None:
            return
        fd = os.open(self.measure_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:  # one write of one short line: appends from several processes do not interleave
            os.write(fd, f"{os.getpid()}\t{event}\t{task_id}\t{label}\n".encode())
        finally:
            os.close(fd)


class _FaultyProblem:
    """One problem's runner with the faults of its `FaultyRunner` before each evaluation."""

    def __init__(self, runner: FaultyRunner, inner, task_id: int) -> None:
        self.runner, self.inner, self.task_id = runner, inner, task_id

    def evaluate(self, config):
        self.runner.before(self.task_id, config.short())
        return self.inner.evaluate(config)

    def sample_us(self, config):
        return self.inner.sample_us(config)
