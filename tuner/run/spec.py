"""What a worker process is given and what it reports back: its spec (picklable for spawn),
the counters it shares with its supervisor, its exit codes and the ways a task can be lost.

Test hooks (environment variables, read in the worker process; `tuner.run.task`):
    TUNER_FAULT_CRASH: `os.abort()` instead of measuring a config whose `KernelConfig.short()`
        label is listed (labels separated by ';'), like a kernel that kills its process.
    TUNER_FAULT_HANG: sleep forever instead of measuring such a config, like a kernel that
        never returns.
    TUNER_TEST_MEASURE_LOG: append `pid, start|done, task_id, label` (tab-separated) to this
        file when a measurement starts and when its trial is stored.
"""

from __future__ import annotations

from dataclasses import dataclass

FAULT_CRASH_ENV = "TUNER_FAULT_CRASH"


FAULT_HANG_ENV = "TUNER_FAULT_HANG"


MEASURE_LOG_ENV = "TUNER_TEST_MEASURE_LOG"


# Exit codes of a worker besides 0 (no task left) and 130 (Ctrl-C).
EXIT_PARENT_GONE = 3  # its supervisor died; it handed its task back


EXIT_RESTART = 4  # a crashed trial on CUDA: the context may be broken; start a fresh process


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
        backend: "cuda", "interpreter", or "replay" (answers from `landscape_path`, no GPU).
        visible_device: CUDA_VISIBLE_DEVICES value that pins the worker to one GPU (cuda only).
        configs: explicit candidate list as vLLM dicts, or None for the sweep's named space.
        lease_s: lease on a claimed task; renewed by a heartbeat every lease_s / 4.
        interpreter_reps: timed calls per trial on the interpreter.
        parent_pid: the sweep process; when it is gone the worker hands its task back and
            exits, so that no orphan keeps timing on a GPU that a new run also uses.
        landscape_path: the landscape file of the replay backend.
        device_name: only tasks of sweeps on this device; None for any.
        space: only tasks of sweeps over this config space (`SweepRequest.space_name`); None
            for any.
        compile_workers: CUDA only: processes of the pool that compiles candidates for the
            GPU's architecture while it measures (`tuner.measure.precompile`); 0 compiles
            nothing ahead and prunes nothing (Triton compiles at first launch).
    """

    db_url: str
    sweep_id: int | None
    worker_id: str
    backend: str
    visible_device: str | None = None
    configs: tuple[tuple[tuple[str, int], ...], ...] | None = None
    lease_s: float = 120.0
    interpreter_reps: int = 3
    parent_pid: int | None = None
    landscape_path: str | None = None
    device_name: str | None = None
    space: str | None = None
    compile_workers: int = 0


class WorkerShared:
    """What a worker process tells its supervisor: its environment_id (0 until known), how
    many trials it has stored, and where its time went (for the sweep's closing line).
    Create in the supervisor, pass to `worker_main` at start.

    Attributes (multiprocessing Values; read `.value`):
        environment_id: the store's id of the worker's environment.
        trials_stored: trials recorded by this process.
        trials_pruned: of those, rejected by compile-for-target pruning, never launched.
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
        self.measure_s = context.Value("d", 0.0, lock=False)
        self.compile_s = context.Value("d", 0.0, lock=False)
        self.compile_wait_s = context.Value("d", 0.0, lock=False)
