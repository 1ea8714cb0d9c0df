"""What a worker process is given and what it reports back: its spec (picklable for spawn),
the counters it shares with its supervisor, its exit codes and the ways a task can be lost.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tuner.core import CONFIG_KEYS
from tuner.run.options import RunOptions

if TYPE_CHECKING:
    from tuner.measure.runners import Runner

# Exit codes of a worker besides 0 (no task left) and 130 (Ctrl-C).
EXIT_PARENT_GONE = 3  # its supervisor died; it handed its task back


EXIT_RESTART = 4  # a crashed trial on CUDA: the context may be broken; start a fresh process


EXIT_STORE = 5  # the store stayed unreachable or full past its deadline; the sweep must stop


def worker_log_path(worker_id: str):
    """Where a worker that dies of an unexpected error writes its traceback (the supervisor
    names the file in its one line): `<temp dir>/tuner-worker-<worker_id>.log`, ':' as '-'."""

    return Path(tempfile.gettempdir()) / f"tuner-worker-{worker_id.replace(':', '-')}.log"


class TaskLost(Exception):
    """The task was taken from this worker (lease expired and re-claimed, or released)."""


class ContextLost(Exception):
    """A config crashed on CUDA: the context may be unusable, so the process must restart."""


@dataclass(frozen=True)
class WorkerSpec:
    """What one worker process needs; picklable for the spawn start method.

    Attributes:
        db_url: SQLAlchemy URL of the store.
        sweep_id: the sweep whose tasks to claim; None for any sweep in scope.
        worker_id: unique name, stored on the tasks it claims.
        runner: how it measures (`tuner.measure.runners`: a GPU, the interpreter, a replay).
        visible_device: CUDA_VISIBLE_DEVICES value that pins the worker to one GPU (a GPU
            runner's only).
        configs: explicit candidate list as vLLM dicts, or None for the sweep's named space.
        parent_pid: the sweep process; when it is gone the worker hands its task back and
            exits, so that no orphan keeps timing on a GPU that a new run also uses.
        device_name: only tasks of sweeps on this device; None for any.
        space: only tasks of sweeps over this config space (`SweepRequest.space_name`); None
            for any.
        compile_workers: GPU runners only: processes of the pool that compiles candidates for
            the GPU's architecture while it measures (`tuner.measure.compile`); 0 compiles
            nothing ahead and prunes nothing (Triton compiles at first launch).
        kernel: whose kernels to time: "builtin" or "vllm" (`tuner.kernels.source`), made
            concrete by the command that starts the worker.
        options: how it holds tasks (lease, trial timeout).
    """

    db_url: str
    sweep_id: int | None
    worker_id: str
    runner: Runner
    visible_device: str | None = None
    configs: tuple[tuple[tuple[str, int], ...], ...] | None = None
    parent_pid: int | None = None
    device_name: str | None = None
    space: str | None = None
    compile_workers: int = 0
    kernel: str = "builtin"
    options: RunOptions = field(default_factory=RunOptions)


@dataclass(frozen=True)
class InFlight:
    """The config a worker is measuring, as its supervisor reads it (`WorkerShared.in_flight`).

    Attributes:
        task_id: the task it is measured for.
        N: the task's N.
        K: the task's K.
        M: the task's M.
        config: vLLM's six keys and values.
        is_default: the config is vLLM's default config at the task's M.
        since: when its measurement started (`time.time()`, seconds).
    """

    task_id: int
    N: int
    K: int
    M: int
    config: dict[str, int]
    is_default: bool
    since: float


class WorkerShared:
    """What a worker process tells its supervisor: its environment_id (0 until known), how
    many trials it has stored, where its time went (for the sweep's closing line), and the
    config it is measuring now (`mark_in_flight`, read by the supervisor when the worker dies
    or overruns the trial timeout, to record that config as crashed or timed out).
    Create in the supervisor, pass to `worker_main` at start.

    The mark lives in memory shared with the supervisor, not in the store: a trial then costs
    one store transaction (its record), not two. The supervisor is always the worker's parent
    on the same host, and only it reads the mark.

    Attributes (multiprocessing Values; read `.value`):
        environment_id: the store's id of the worker's environment.
        trials_stored: trials recorded by this process.
        trials_pruned: of those, rejected by compile-for-target pruning, never launched.
        trials_reused: trials of the same measurement copied from other sweeps' tasks
            (`db.repo.adopt_measurements`), not measured.
        measure_s: seconds spent in the runner (check and timing), summed over trials.
        compile_s: seconds its precompile pool spent compiling (overlapped with measuring).
        compile_wait_s: seconds measuring waited for a compile.

    Args:
        context: the multiprocessing context the worker is started with.
    """

    def __init__(self, context) -> None:
        # No locks: one writer (the worker), and a lock would start a resource-tracker process.
        self.environment_id = context.Value("q", 0, lock=False)
        self.trials_stored = context.Value("q", 0, lock=False)
        self.trials_pruned = context.Value("q", 0, lock=False)
        self.trials_reused = context.Value("q", 0, lock=False)
        self.measure_s = context.Value("d", 0.0, lock=False)
        self.compile_s = context.Value("d", 0.0, lock=False)
        self.compile_wait_s = context.Value("d", 0.0, lock=False)
        # The mark: [seq, task_id (0: none), N, K, M, six config values, is_default] and since.
        # seq is odd while the worker rewrites the mark, so a reader never takes half of one.
        self._flight = context.Array("q", 12, lock=False)
        self._since = context.Value("d", 0.0, lock=False)
        # The one line of a worker that stopped for the store (EXIT_STORE), UTF-8, NUL-ended.
        self._store_error = context.Array("c", 512, lock=False)

    def set_store_error(self, line: str) -> None:
        """Say why the worker stopped for the store (before exiting with EXIT_STORE)."""
        data = line.encode()[:511]
        self._store_error[: len(data) + 1] = data + b"\0"

    def store_error(self) -> str:
        """The line set by `set_store_error`, or ""."""
        return bytes(self._store_error[:]).split(b"\0", 1)[0].decode(errors="replace")

    def mark_in_flight(
        self,
        task_id: int,
        nkm: tuple[int, int, int],
        config: dict[str, int],
        is_default: bool,
        since: float,
    ) -> None:
        """Say which config the worker starts measuring (the worker's side; one writer).

        Args:
            task_id: the task, > 0.
            nkm: the task's (N, K, M).
            config: vLLM's six keys in vLLM's order.
            is_default: the config is vLLM's default at the task's M.
            since: `time.time()` at the start of the measurement.
        """
        flight = self._flight
        flight[0] += 1
        flight[1:12] = [task_id, *nkm, *config.values(), int(is_default)]
        self._since.value = since
        flight[0] += 1

    def clear_in_flight(self) -> None:
        """No config is being measured any more (its trial is stored, or was given up)."""
        flight = self._flight
        flight[0] += 1
        flight[1] = 0
        flight[0] += 1

    def in_flight(self) -> InFlight | None:
        """The config the worker is measuring (the supervisor's side), or None.

        Returns:
            The mark; None when there is none, or when the worker kept rewriting it while it
            was read (a live worker between two trials: nothing to blame).
        """

        flight = self._flight
        for _ in range(100):
            seq = flight[0]
            values, since = flight[:], self._since.value
            if seq % 2 == 0 and flight[0] == seq:
                break
        else:
            return None
        if values[1] == 0:
            return None
        return InFlight(
            task_id=values[1],
            N=values[2],
            K=values[3],
            M=values[4],
            config=dict(zip(CONFIG_KEYS, values[5:11], strict=True)),
            is_default=bool(values[11]),
            since=since,
        )
