"""Worker process: claims tasks of a sweep from the store and searches each (`tuner.run.task`)
until none is left, renewing its lease and watching for its supervisor's death.

Before measuring a config the worker marks it in flight in the memory it shares with its
supervisor (`WorkerShared.mark_in_flight`) and clears the mark once the trial is stored; the
supervisor (tuner.run.supervisor) reads the mark when the worker dies or hangs and records that
config as crashed or timed out. A trial costs one store transaction: its record.
"""

from __future__ import annotations

import os
import threading
import time
from typing import TYPE_CHECKING

from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from db import repo
from db.repo import (
    StoreUnavailable,
    connect,
    describe_store_error,
    is_transient,
    retry_store,
    session_scope,
    store_timeout_s,
)
from tuner.kernels.config import KernelConfig
from tuner.kernels.registry import DEFAULT_FAMILY
from tuner.measure.roofline import ceiling_details, measure_ceilings
from tuner.run.compile_gate import WorkerCompiler
from tuner.run.lease import Heartbeat, Lease
from tuner.run.task import run_task
from tuner.run.worker_spec import (
    EXIT_PARENT_GONE,
    EXIT_RESTART,
    EXIT_STORE,
    ContextLost,
    TaskLost,
    WorkerShared,
    WorkerSpec,
    worker_log_path,
)

if TYPE_CHECKING:
    from tuner.measure.runners import Runner

# torch, triton and the kernel are imported inside the worker process, after the runner set its
# environment (`Runner.pin`): this module is imported by the parent too.


def collect_environment(
    runner: Runner, family: str = DEFAULT_FAMILY, kernel: str = "builtin"
) -> dict[str, str]:
    """GPU, versions and kernel of this process, as `db.repo.get_or_create_environment` takes
    (`Runner.environment`).

    The kernel hash is that of `family`'s kernel from the source `kernel` names, so a changed
    kernel leaves only its own family's and source's trials stale. On the interpreter,
    gpu_name and device_name are TRITON_INTERPRETER and driver/CUDA are "".

    Raises:
        ValueError: an unknown family or kernel choice.
    """
    return runner.environment(kernel, family)


class _ParentWatch(threading.Thread):
    """Ends the worker when the sweep process that started it dies (SIGKILL, SIGTERM, crash).

    It holds `claim_lock` from handing the task back to the exit, so the worker's loop (which
    claims under that lock) cannot take a new task in between and leave it leased to no one.
    """

    def __init__(self, store, spec: WorkerSpec, claim_lock: threading.Lock) -> None:
        super().__init__(daemon=True)
        self.store, self.spec, self.claim_lock = store, spec, claim_lock

    def run(self) -> None:

        while os.getppid() == self.spec.parent_pid:
            time.sleep(0.25)
        self.claim_lock.acquire()
        try:
            with session_scope(self.store) as session:
                repo.release_tasks(session, worker_id=self.spec.worker_id)
        finally:
            os._exit(EXIT_PARENT_GONE)  # at once: the trial in flight is lost, the rest is stored


def _record_ceilings(store, environment_id: int, device: str) -> None:
    """Measure this GPU's copy bandwidth and FP8-mm throughput (`tuner.measure.roofline`) and store
    them with the environment, for the roofline ratios of its winners. A failure is reported
    and the worker goes on: the ratios are then left out."""

    try:
        ceilings = measure_ceilings(device)
    except Exception as exc:  # noqa: BLE001 - ceilings are a report's extra, not the job
        print(f"ceilings not measured: {type(exc).__name__}: {exc}", flush=True)
        return
    with session_scope(store) as session:
        repo.record_ceilings(
            session,
            environment_id=environment_id,
            ceilings=ceilings,
            details=ceiling_details(device),
        )


def worker_main(spec: WorkerSpec, shared: WorkerShared | None = None) -> None:
    """Entry point of a worker process: claim and run tasks until none is left.

    Lets its runner set the process's environment (`Runner.pin`: CUDA_VISIBLE_DEVICES on a GPU,
    TRITON_INTERPRET=1 on the interpreter) before torch and triton are imported, so a spawned
    process sees one GPU, or runs the kernel on the CPU interpreter.
    Exits with EXIT_RESTART after a crashed trial on a GPU, so that its supervisor starts a
    fresh process (and CUDA context) for the rest of the task; with EXIT_STORE when the store
    stayed unreachable or full past its deadline (`db.faults.retry_store`), its line in
    `shared`; with 1 after an unexpected error, whose traceback goes to
    `worker_log_path(spec.worker_id)` (the supervisor names it), not to the terminal.

    Args:
        spec: what to claim and how to measure.
        shared: counters shared with the supervisor, if any.
    """

    try:
        _work(spec, shared)
    except KeyboardInterrupt:  # Ctrl-C reaches the whole process group; the parent cleans up
        raise SystemExit(130) from None
    except StoreUnavailable as exc:
        if shared is not None:
            shared.set_store_error(str(exc))
        raise SystemExit(EXIT_STORE) from None
    except Exception:  # noqa: BLE001 - one line from the supervisor, the traceback in a file
        if shared is None:
            raise
        import traceback

        worker_log_path(spec.worker_id).write_text(traceback.format_exc())
        raise SystemExit(1) from None


def _work(spec: WorkerSpec, shared: WorkerShared | None) -> None:
    spec.runner.pin(spec.visible_device)
    _Worker(spec, shared).claim_loop()


class _Worker:
    """One worker process: its setup (`__init__`: the store, its environment, the GPU's
    ceilings, the candidate space, the compile pool) and its claim loop (`claim_loop`)."""

    def __init__(self, spec: WorkerSpec, shared: WorkerShared | None) -> None:

        self.spec, self.shared = spec, shared
        self.store = connect(spec.db_url)
        self.claim_lock = threading.Lock()
        if spec.parent_pid is not None:
            _ParentWatch(self.store, spec, self.claim_lock).start()
        runner = spec.runner
        self.env = collect_environment(runner, kernel=spec.kernel)
        environment_id = self.in_session(repo.get_or_create_environment, **self.env)
        if runner.on_gpu:
            _record_ceilings(self.store, environment_id, "cuda")
        self._share_environment(environment_id)
        # Each family's trials are recorded with its own kernel's hash (a replay keeps the
        # landscape's environment for all: the same row).
        self.environments = {DEFAULT_FAMILY: environment_id}
        self.space = None  # each task's family's space (vLLM's grid), unless configs are named
        if spec.configs is not None:
            self.space = [KernelConfig.from_dict(dict(items)) for items in spec.configs]
        self.compiler = None
        if runner.on_gpu and spec.compile_workers > 0:
            self.compiler = WorkerCompiler.for_this_gpu(spec.compile_workers)

    def stored(self, step):
        """One store transaction, retried on a fresh connection while the store is down."""

        return retry_store(step, url=self.spec.db_url)

    def in_session(self, function, **kwargs):
        """`function(session, **kwargs)` in one retried transaction."""

        def step():
            with session_scope(self.store) as session:
                return function(session, **kwargs)

        return self.stored(step)

    def _share_environment(self, environment_id: int) -> None:
        if self.shared is not None:
            self.shared.environment_id.value = environment_id

    def claim(self):
        """(a claimed task or None, the unfinished tasks in scope), under the claim lock."""

        with self.claim_lock, session_scope(self.store) as session:
            spec = self.spec
            task = repo.claim_task(
                session,
                worker_id=spec.worker_id,
                lease_s=spec.options.lease_s,
                sweep_id=spec.sweep_id,
                device_name=spec.device_name,
                space=spec.space,
            )
            return task, repo.unfinished_tasks(
                session, sweep_id=spec.sweep_id, device_name=spec.device_name, space=spec.space
            )

    def environment_for(self, task) -> int:
        """The environment the task's trials are recorded with (its family's kernel)."""

        if task.family not in self.environments:
            family_env = self.spec.runner.environment(self.spec.kernel, task.family)
            self.environments[task.family] = self.in_session(
                repo.get_or_create_environment, **family_env
            )
        return self.environments[task.family]

    def claim_loop(self) -> None:
        """Claim and run tasks until none is left in scope; wait out leases of tasks that
        workers which may have died still hold."""

        spec = self.spec
        while True:
            task, unfinished = self.stored(self.claim)
            if task is None:
                if unfinished == 0:
                    return
                time.sleep(min(5.0, spec.options.lease_s / 4))
                continue
            state, error = self.run_claimed(task)
            if state is None:
                continue  # the task was taken from this worker: another worker has it now
            self.in_session(
                repo.finish_task,
                task_id=task.task_id,
                worker_id=spec.worker_id,
                state=state,
                error=error,
                budget=task.budget,
            )
            if state == "failed" and spec.runner.on_gpu and not _cuda_usable():
                # A sticky CUDA error raised outside a trial (re-timing, inputs): every later
                # task of this process would fail at once. The failed task stays failed; a
                # fresh process takes the others.
                raise SystemExit(EXIT_RESTART)

    def run_claimed(self, task) -> tuple[str | None, str | None]:
        """Run one claimed task under a heartbeat, again while the store has a transient
        outage (stored trials are not measured again), up to the store's deadline.

        Returns:
            ("done", None), ("failed", the error's line), or (None, None) when the task was
            taken from this worker.

        Raises:
            SystemExit: EXIT_RESTART after a crashed trial on a GPU (the task handed back).
            db.faults.StoreUnavailable: the store stayed down past its deadline (the task is
                handed back where the store allows).
        """

        spec = self.spec
        environment_id = self.environment_for(task)
        self._share_environment(environment_id)
        lease = Lease(self.store, task.task_id, spec.worker_id, spec.options.lease_s)
        beat = Heartbeat(lease)
        beat.start()
        outage_since = None  # a store error is never the task's: the task is run again
        try:
            while True:
                try:
                    run_task(
                        self.store,
                        spec,
                        task,
                        environment_id,
                        self.space,
                        self.shared,
                        self.compiler,
                        lease,
                    )
                    return "done", None
                except (DBAPIError, PoolTimeoutError) as exc:
                    if not is_transient(exc):
                        raise StoreUnavailable(_store_line(exc, spec.db_url)) from exc
                    outage_since = outage_since or time.monotonic()
                    if time.monotonic() - outage_since > store_timeout_s():
                        raise StoreUnavailable(_store_line(exc, spec.db_url)) from exc
                    time.sleep(1.0)
        except TaskLost:
            return None, None
        except ContextLost:
            self.in_session(repo.release_tasks, worker_id=spec.worker_id)
            raise SystemExit(EXIT_RESTART) from None
        except StoreUnavailable:
            _hand_back(self.store, spec)
            raise
        except Exception as exc:  # noqa: BLE001 - the task is marked failed, the worker goes on
            return "failed", f"{type(exc).__name__}: {exc}"[:1000]
        finally:
            beat.stopped.set()


def _store_line(exc: BaseException, url: str) -> str:

    return describe_store_error(exc, url)


def _hand_back(store, spec: WorkerSpec) -> None:
    """Hand this worker's task back on the way out, if the store answers within a few seconds
    (else its supervisor tries, and past that the lease expires)."""

    def step():
        with session_scope(store) as session:
            repo.release_tasks(session, worker_id=spec.worker_id)

    try:
        retry_store(step, url=spec.db_url, deadline_s=5.0)
    except (StoreUnavailable, Exception):  # noqa: BLE001 - best effort: the lease ends anyway
        pass


def _cuda_usable() -> bool:
    """Whether this process's CUDA context still runs work (a sticky error such as an illegal
    memory access makes every later call raise)."""
    import torch

    try:
        torch.cuda.synchronize()
    except RuntimeError:
        return False
    return True
