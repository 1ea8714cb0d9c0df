"""What a worker process does and needs: its spec (picklable for spawn), the memory it shares
with its supervisor, the lease of its claimed task, its compile pool (CUDA), the search of that
task, and its claim loop.

Before measuring a config the worker marks it in flight in the memory it shares with its
supervisor (`WorkerShared.mark_in_flight`) and clears the mark once the trial is stored; the
supervisor (tuner.run.supervisor) reads the mark when the worker dies or hangs and records that
config as crashed or timed out, and hands the worker's task back whenever it exits. Whether the
worker still holds its task is kept by its lease's heartbeat (`Lease`), so a trial costs one
store transaction: its record. torch and triton are imported inside the worker process, after
the runner set its environment (`Runner.pin`).
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os
import tempfile
import threading
import time
import traceback
import zlib
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from db import repo
from db.repo import StoreUnavailable, connect, describe_store_error, retry_store, session_scope
from tuner.core import CONFIG_KEYS, TrialStatus
from tuner.kernels.config import KernelConfig
from tuner.kernels.gpus import MAX_SHARED_BYTES
from tuner.kernels.registry import get_family
from tuner.kernels.shape import FamilyShape
from tuner.measure.compile import CompileJob, compile_job, compile_pool, launch_problem
from tuner.measure.noise import RETIME_ROUNDS, decide_winner, retime_interleaved, select_for_retime
from tuner.measure.runner import Problem
from tuner.measure.trial import TrialResult
from tuner.run.plan import trial_cap
from tuner.search.registry import get_strategy
from tuner.search.warm_start import related as related_timings
from tuner.search.warm_start import warm_start_for_task

if TYPE_CHECKING:
    from tuner.measure.runner import ProblemRunner, Runner

# Exit codes of a worker besides 0 (no task left) and 130 (Ctrl-C).
EXIT_PARENT_GONE = 3  # its supervisor died; it handed its task back
EXIT_RESTART = 4  # a crashed trial on CUDA: the context may be broken; start a fresh process
EXIT_STORE = 5  # the store stayed unreachable or full past its deadline; the sweep must stop
# Successive halving of measurement effort, in two rungs: every candidate of the search is
# timed briefly (about 20 samples of ~1 ms graph replays, against do_bench's 100 ms), and the
# finalists (tuner.measure.noise.select_for_retime: the fastest few and the default) are re-timed
# interleaved for RETIME_ROUNDS more samples each before a winner is kept. At 128 candidates per
# task the search's GPU time per trial drops from ~125 ms to ~25 ms of timing (estimated from
# these budgets; not yet measured on a GPU).
SEARCH_WARMUP_S = 0.005
SEARCH_REP_S = 0.020
# The fields of a trial's result besides its status, as the store's trial rows name them.
RESULT_FIELDS = tuple(f.name for f in dataclasses.fields(TrialResult))[1:]


def lease_s_default() -> float:
    """Seconds a claimed task stays leased without a heartbeat: $TUNER_LEASE_S (a test hook:
    tests shorten it so that tasks of killed workers come back in seconds), else 120."""
    return float(os.environ.get("TUNER_LEASE_S") or 120)


def worker_log_path(worker_id: str) -> Path:
    """Where a worker that dies of an unexpected error writes its traceback (the supervisor
    names the file in its one line): `<temp dir>/tuner-worker-<worker_id>.log`, ':' as '-'."""
    return Path(tempfile.gettempdir()) / f"tuner-worker-{worker_id.replace(':', '-')}.log"


def task_seed(sweep_seed: int, N: int, K: int, M: int) -> int:
    """Seed of one task's search: stable for the same sweep seed and shape, whatever the store."""
    return zlib.crc32(f"{sweep_seed}:{N}:{K}:{M}".encode())


class TaskLost(Exception):
    """The task was taken from this worker (lease expired and re-claimed, or released)."""


class ContextLost(Exception):
    """A config crashed on CUDA (or a task failed there): the context may be unusable, so the
    process must restart (EXIT_RESTART)."""


class _BudgetSpent(Exception):
    """A resumed search asked for a config beyond the task's budget (see `trial_cap`)."""


@dataclass(frozen=True)
class WorkerSpec:
    """What one worker process needs; picklable for the spawn start method.

    Attributes:
        db_url: SQLAlchemy URL of the store.
        sweep_id: the sweep whose tasks to claim; None for any sweep in scope.
        worker_id: unique name, stored on the tasks it claims.
        runner: how it measures (`tuner.measure.runner`: a GPU, the interpreter, a replay).
        visible_device: CUDA_VISIBLE_DEVICES value that pins the worker to one GPU (a GPU
            runner's only).
        configs: explicit candidate list, or None for the sweep's named space.
        parent_pid: the sweep process; when it is gone the worker hands its task back and
            exits, so that no orphan keeps timing on a GPU that a new run also uses.
        device_name: only tasks of sweeps on this device; None for any.
        space: only tasks of sweeps over this config space; None for any.
        compile_workers: GPU runners only: processes of the pool that compiles candidates for
            the GPU's architecture while it measures; 0 compiles nothing ahead.
        kernel: whose kernels to time: "builtin" or "vllm" (`tuner.kernels.source`).
        lease_s: seconds a claimed task stays leased without a heartbeat (`lease_s_default`).
    """

    db_url: str
    sweep_id: int | None
    worker_id: str
    runner: Runner
    visible_device: str | None = None
    configs: tuple[KernelConfig, ...] | None = None
    parent_pid: int | None = None
    device_name: str | None = None
    space: str | None = None
    compile_workers: int = 0
    kernel: str = "builtin"
    lease_s: float = field(default_factory=lease_s_default)

    @property
    def scope(self) -> dict[str, Any]:
        """The tasks this worker claims, as `db.repo.claim_task` and `unfinished_tasks` take
        them: sweep_id, device_name and space (None: any)."""
        return {"sweep_id": self.sweep_id, "device_name": self.device_name, "space": self.space}


@dataclass(frozen=True)
class InFlight:
    """The config a worker is measuring, as its supervisor reads it (`WorkerShared.in_flight`):
    its task, the task's N, K, M, vLLM's six keys and values, whether it is vLLM's default at
    that M, and when its measurement started (`time.time()`, seconds)."""

    task_id: int
    N: int
    K: int
    M: int
    config: dict[str, int]
    is_default: bool
    since: float


class WorkerShared:
    """What a worker process tells its supervisor, in memory they share (create in the
    supervisor, pass to `worker_main`): its environment_id (0 until known), trials stored and
    reused (`db.repo.adopt_measurements`), seconds spent measuring and compiling (`.value` of
    each), and the config it is measuring now
    (`mark_in_flight`, read when the worker dies or overruns the trial timeout).

    Args:
        context: the multiprocessing context the worker is started with.
    """

    def __init__(self, context) -> None:
        # No locks: one writer (the worker), and a lock would start a resource-tracker process.
        self.environment_id = context.Value("q", 0, lock=False)
        self.trials_stored = context.Value("q", 0, lock=False)
        self.trials_reused = context.Value("q", 0, lock=False)
        self.measure_s = context.Value("d", 0.0, lock=False)
        self.compile_s = context.Value("d", 0.0, lock=False)
        # The mark: [seq, task_id (0: none), N, K, M, six config values, is_default] and since.
        # seq is odd while the worker rewrites the mark, so a reader never takes half of one.
        self._flight = context.Array("q", 12, lock=False)
        self._since = context.Value("d", 0.0, lock=False)

    def mark_in_flight(self, task, config: KernelConfig | None, is_default: bool = False) -> None:
        """Say which config the worker starts measuring now (the worker's side; one writer);
        None: no config is being measured any more (its trial is stored, or was given up).

        Args:
            task: the claimed task (its task_id, N, K, M).
            config: the config, or None.
            is_default: the config is vLLM's default at the task's M.
        """
        flight = self._flight
        flight[0] += 1
        if config is None:
            flight[1] = 0
        else:
            nkm = (task.N, task.K, task.M)
            flight[1:12] = [task.task_id, *nkm, *config.as_dict().values(), int(is_default)]
            self._since.value = time.time()
        flight[0] += 1

    def in_flight(self) -> InFlight | None:
        """The config the worker is measuring (the supervisor's side); None when there is
        none, or when the worker kept rewriting the mark while it was read."""
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
        config = dict(zip(CONFIG_KEYS, values[5:11], strict=True))
        return InFlight(values[1], values[2], values[3], values[4], config, bool(values[11]), since)


class Lease:
    """A worker's hold on its claimed task, renewed in the store by a heartbeat: `lost` is set
    once a renewal finds the task taken (its lease ended and another worker claimed it, or it
    was released), and is final. A trial's record is fenced to the hold anyway
    (`db.repo.record_trial`), so a worker that has not noticed yet stores nothing.

    Args:
        store: the store (its Engine).
        task_id: the claimed task.
        worker_id: the worker that claimed it.
        lease_s: seconds a renewal holds the task.
    """

    def __init__(self, store, task_id: int, worker_id: str, lease_s: float) -> None:
        self.store, self.task_id = store, task_id
        self.worker_id, self.lease_s = worker_id, lease_s
        self.lost = threading.Event()

    def renew(self, session=None) -> bool:
        """Extend the lease in the store (in `session` when given, else in a transaction of its
        own); True while the worker holds the task, False once it was taken (then always).

        Raises:
            sqlalchemy.exc.DBAPIError: the store could not be reached.
        """
        if self.lost.is_set():
            return False
        with nullcontext(session) if session is not None else session_scope(self.store) as own:
            held = repo.heartbeat(
                own, task_id=self.task_id, worker_id=self.worker_id, lease_s=self.lease_s
            )
        if not held:
            self.lost.set()
        return held

    def heartbeat(self) -> threading.Event:
        """Renew every lease_s / 4 in a thread until the returned event is set or a renewal
        finds the task taken; a missed beat (the store busy or down) is retried at the next."""
        stopped = threading.Event()

        def beat() -> None:
            while not stopped.wait(self.lease_s / 4):
                try:
                    if not self.renew():
                        return
                except Exception:  # noqa: BLE001, S112 - retried at the next beat, the lease has slack
                    continue

        threading.Thread(target=beat, daemon=True).start()
        return stopped


class CompileAhead:
    """A CUDA worker's compile pool, shared by its tasks: each task sends the configs its search
    measures first whatever their results (`Strategy.planned`) when it starts, and asks for
    each config before it is launched (`check`): a config not sent yet goes ahead of those still
    waiting (they are sent again when asked). Each compile writes the binary to Triton's cache
    under the key the measuring process's JIT computes for the same launch
    (`tuner.kernels.target`), so the first launch loads instead of compiling.

    A pool whose process died is `broken`: its configs are launched unpruned (Triton compiles
    them in the measuring process, a compiler crash is recorded as crashed there) and the pool
    is replaced when the task ends.

    Args:
        workers: processes of the pool.
        arch: compute capability as an int (a key of MAX_SHARED_BYTES).
        shared: the worker's `WorkerShared` (compile seconds are added to it).
    """

    def __init__(self, workers: int, arch: int, shared: WorkerShared) -> None:
        self.workers, self.arch, self.shared = workers, arch, shared
        self.pool = compile_pool(workers)
        self.futures: dict[KernelConfig, Future] = {}
        self.broken = False

    @classmethod
    def for_this_gpu(cls, workers: int, shared: WorkerShared) -> CompileAhead | None:
        """The pool for the visible GPU, or None (with a line saying so) when its architecture
        has no known resource limits (`tuner.kernels.gpus.MAX_SHARED_BYTES`): pruning would
        then fail every task, so Triton compiles at first launch instead."""
        import torch

        major, minor = torch.cuda.get_device_capability()
        arch = 10 * major + minor
        if arch not in MAX_SHARED_BYTES:
            print(f"no precompiling for sm{arch}: its resource limits are not known", flush=True)
            return None
        return cls(workers, arch, shared)

    def start(self, problem: Problem, configs: list[KernelConfig]) -> None:
        """Send a task's first configs (at `problem`'s launch) to the pool, in order."""
        self.problem, self.futures = problem, {}
        for config in configs:
            self.submit(config)

    def submit(self, config: KernelConfig) -> None:
        problem = self.problem
        launch = (problem.shape, problem.M, problem.out_dtype, problem.family)
        try:
            job = CompileJob(config, self.arch, *launch, need_info=False)
            self.futures[config] = self.pool.submit(compile_job, job)
        except RuntimeError:  # BrokenProcessPool, or a pool already shut down
            self.broken = True

    def check(self, config: KernelConfig) -> TrialResult | None:
        """The out_of_resources or compile_error trial to record instead of launching `config`,
        or None when it may be launched (or the pool cannot tell)."""
        future = self.futures.get(config)
        if not self.broken and (future is None or future.cancelled()):
            for waiting in self.futures.values():
                waiting.cancel()
            self.submit(config)
        try:
            info = self.futures[config].result()
        except Exception as exc:  # noqa: BLE001 - not sent, a dead process, a compile cancelled
            self.broken = self.broken or isinstance(exc, BrokenProcessPool)
            return None
        self.shared.compile_s.value += info.compile_s
        return launch_problem(info)

    def end(self) -> None:
        """Drop the task's compiles still waiting; replace the pool when it lost a process."""
        for future in self.futures.values():
            future.cancel()
        if self.broken:
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool, self.broken = compile_pool(self.workers), False


class TaskRun:
    """One claimed task, searched in named steps (`run` calls them in order):

    - `resume`: the trials the store already has for the task, and the winners and related
      tasks' trials known when its first trial was stored (the same on every resumption);
    - `plan`: the runner, vLLM's default config, the warm starts, the strategy and, for a
      resumed task, the cap on its trials (`trial_cap`);
    - the compile pool (GPU runners) gets what the search asks first;
    - `evaluate` (the search's objective): measure one config, `record` its trial;
    - `decide`: re-time the finalists and store the config kept.

    Trials already in the store are answered from the store, new ones recorded as they
    finish, so a kill loses at most one and a resumed (or extended) task measures only the
    trials an uninterrupted search adds.

    Args:
        store: the store (its Engine).
        spec: this worker.
        task: the claimed task (`repo.TaskInfo`).
        environment_id: the environment trials are recorded with.
        space: the candidate configs; None for the task's family's space (vLLM's grid).
        shared: counters shared with the supervisor; None for counters of its own.
        compiler: GPU runners only: compiles candidates ahead and prunes those that cannot
            launch (None: no pruning).
        lease: the task's lease; None for one of its own.
    """

    def __init__(
        self,
        store,
        spec: WorkerSpec,
        task,
        environment_id: int,
        space=None,
        shared: WorkerShared | None = None,
        compiler: CompileAhead | None = None,
        lease: Lease | None = None,
    ) -> None:
        self.store, self.spec, self.task = store, spec, task
        self.environment_id, self.compiler = environment_id, compiler
        self.shared = shared or WorkerShared(mp.get_context("spawn"))
        self.space: list = list(space or ())  # empty: the family's space, read by `plan`
        self.key = FamilyShape.of_row(task)  # the task's family and shape, read once
        self.lease = lease or Lease(store, task.task_id, spec.worker_id, spec.lease_s)
        self.done: dict = {}  # KernelConfig -> TrialResult, stored and new
        self.runner: ProblemRunner

    def lost(self) -> TaskLost:
        return TaskLost(f"task {self.task.task_id} is no longer held by {self.spec.worker_id}")

    def run(self) -> None:
        """Resume, plan, start the compiles, search, decide.

        Raises:
            TaskLost: the task was taken from this worker; nothing more was recorded for it.
            ContextLost: a config crashed on a GPU; its trial is recorded, the process must
                restart.
        """
        self.plan(*self.resume())
        if self.compiler is not None:  # what the search asks first, whatever the results
            first = self.strategy.planned(space=self.space, seed=self.seed, warm_start=self.warm)
            todo = [self.default, *first[: self.task.budget]]
            self.compiler.start(
                self.problem, [c for c in dict.fromkeys(todo) if c not in self.done]
            )
        try:
            self.evaluate(self.default)  # the baseline of every task, whatever the strategy
            learns = {"related": self.related} if self.strategy.reads_related else {}
            self.strategy.search(
                self.evaluate,
                space=self.space,
                budget=self.task.budget,
                seed=self.seed,
                warm_start=self.warm,
                **learns,
            )
        except _BudgetSpent:
            pass
        finally:
            if self.compiler is not None:
                self.compiler.end()
        self.decide()

    def resume(self) -> tuple[list, list]:
        """Renew the lease, load the task's stored trials into `done`, and return the winners
        the store knew for the device when the task's first trial was stored, and (for a
        strategy that `reads_related`) the ok trials of its related tasks it knew then.

        Raises:
            TaskLost: the lease could not be renewed.
        """
        task = self.task
        with session_scope(self.store) as session:
            if not self.lease.renew(session):
                raise self.lost()
            reused = repo.adopt_measurements(
                session, task_id=task.task_id, environment_id=self.environment_id
            )
            stored = repo.task_trials(session, task_id=task.task_id)
            for t in stored:
                result = [getattr(t, name) for name in RESULT_FIELDS]
                self.done[KernelConfig.from_dict(t.config)] = TrialResult(
                    TrialStatus(t.status), *result
                )
            scope = dict(
                device_name=task.device_name,
                block_shape=task.block_shape,
                out_dtype=task.out_dtype,
                finished_before=min((t.created_at for t in stored if t.created_at), default=None),
                **self.key.store_fields(),
            )
            winners = repo.task_winners(session, **scope)
            related = []
            if get_strategy(task.strategy).reads_related:
                related = repo.related_trials(session, N=task.N, K=task.K, M=task.M, **scope)
        self.shared.trials_reused.value += reused
        return winners, related

    def plan(self, known: list, related: list) -> None:
        """The space, problem, runner, default config, warm starts (from `known`, the store's
        winners), the related tasks' timings (from `related`, the store's trials), strategy
        and, for a resumed task, the trial cap."""
        task = self.task
        family, shape = get_family(self.key.family), self.key.shape
        self.space = self.space or family.space()
        self.problem = Problem(
            task.M,
            task.N,
            task.K,
            shape.block_shape,
            task.out_dtype,
            family=family.name,
            params=shape.params,
            kernel=self.spec.kernel,
        )
        self.seed = task_seed(task.seed, task.N, task.K, task.M)
        self.runner = self.spec.runner.problem_runner(
            self.problem,
            task_id=task.task_id,
            seed=self.seed,
            warmup_s=SEARCH_WARMUP_S,
            rep_s=SEARCH_REP_S,
        )
        self.default = family.default_config(shape, task.M)
        warm = [(w.N, w.K, w.M, KernelConfig.from_dict(w.config)) for w in known]
        self.warm = warm_start_for_task(warm, N=task.N, K=task.K, M=task.M, default=self.default)
        timings: dict[tuple[int, int, int], list[tuple[KernelConfig, float]]] = {}
        for row in related:
            timings.setdefault((row.N, row.K, row.M), []).append(
                (KernelConfig.from_dict(row.config), row.latency_us)
            )
        self.related = related_timings((task.N, task.K, task.M), timings)
        self.strategy = get_strategy(task.strategy)
        self.cap = trial_cap(task.budget, self.space, self.default) if self.done else None

    def evaluate(self, config: KernelConfig) -> TrialResult:
        """The search's objective: the stored result of `config`, or a new trial measured and
        recorded.

        Raises:
            TaskLost: the task is no longer held.
            ContextLost: the config crashed on a GPU (its trial is recorded).
        """
        if config in self.done:
            return self.done[config]
        if self.cap is not None:  # a resumed task: count only when there is a cap to reach
            counted = sum(r.status not in self.strategy.free for r in self.done.values())
            if counted >= self.cap:
                raise _BudgetSpent
        if self.lease.lost.is_set():
            raise self.lost()
        is_default = config == self.default
        self.shared.mark_in_flight(self.task, config, is_default)
        try:
            pruned = self.compiler.check(config) if self.compiler is not None else None
            result = pruned or self.runner.evaluate(config)
            self.store_fenced(
                repo.record_trial, config=config.as_dict(), is_default=is_default, **asdict(result)
            )
        finally:
            self.shared.mark_in_flight(self.task, None)
        self.spec.runner.stored(self.task.task_id, config)
        self.shared.trials_stored.value += 1
        self.shared.measure_s.value += result.measure_s or 0.0
        self.done[config] = result
        if self.spec.runner.on_gpu and result.status is TrialStatus.CRASHED:
            raise ContextLost(result.error or "crashed")
        return result

    def store_fenced(self, write, **values: Any) -> None:
        """`write(session, task_id=, worker_id=, environment_id=, **values)` in one transaction,
        fenced to this worker's hold on the task; a failed store is retried with the values in
        hand (`write` is idempotent).

        Raises:
            TaskLost: the task was taken from this worker; nothing was stored.
        """

        def step() -> bool:
            with session_scope(self.store) as session:
                return write(
                    session,
                    task_id=self.task.task_id,
                    worker_id=self.spec.worker_id,
                    environment_id=self.environment_id,
                    **values,
                )

        if not retry_store(step, url=self.spec.db_url):
            raise self.lost()

    def decide(self) -> None:
        """Re-time the fastest configs and the default interleaved, and store the config kept
        (`tuner.measure.noise.decide_winner`). A task whose stored decision re-timed the
        finalists its trials give now is not re-timed; one whose finalists changed (extended)
        is re-timed and its decision replaced. Nothing is stored without an ok trial.

        Raises:
            TaskLost: the task was taken from this worker; its decision was not stored.
        """
        finalists = select_for_retime(self.done, self.default)
        if not finalists:
            return
        with session_scope(self.store) as session:
            decided = repo.task_decision(session, task_id=self.task.task_id)
            retimed = (
                {KernelConfig.from_dict(r.config) for r in decided.retimes} if decided else set()
            )
        if retimed == set(finalists):
            return
        rounds = self.spec.runner.retime_rounds(RETIME_ROUNDS)
        retimes = retime_interleaved(self.runner.sample_us, finalists, rounds=rounds)
        decision = decide_winner(retimes, self.default)
        rows = [asdict(r) | {"is_default": r.config == self.default} for r in retimes]
        # the configs as vLLM's dicts, the runner-up's or None; the re-timing survives an outage
        self.store_fenced(repo.record_decision, retimes=rows, decision=asdict(decision))


def worker_main(spec: WorkerSpec, shared: WorkerShared | None = None) -> None:
    """Entry point of a worker process: let its runner set the process's environment
    (`Runner.pin`) before torch and triton are imported, then claim and run tasks until none
    is left. Exits with EXIT_RESTART after a crashed trial or a failed task on a GPU (a fresh
    process and CUDA context for the rest; the supervisor hands the task back), with EXIT_STORE
    when the store stayed unreachable or full past its deadline (its one line written to
    `worker_log_path(spec.worker_id)`, which the supervisor reads), with 1 after an unexpected
    error, whose traceback goes to that file, and with 130 on Ctrl-C.

    Args:
        spec: what to claim and how to measure.
        shared: counters shared with the supervisor, if any.
    """
    try:
        spec.runner.pin(spec.visible_device)
        _Worker(spec, shared or WorkerShared(mp.get_context("spawn"))).claim_loop()
    except KeyboardInterrupt:  # Ctrl-C reaches the whole process group; the parent cleans up
        raise SystemExit(130) from None
    except ContextLost:
        raise SystemExit(EXIT_RESTART) from None
    except StoreUnavailable as exc:  # its line for the supervisor, in the worker's log
        worker_log_path(spec.worker_id).write_text(str(exc))
        raise SystemExit(EXIT_STORE) from None
    except Exception:  # noqa: BLE001 - one line from the supervisor, the traceback in a file
        if shared is None:
            raise
        worker_log_path(spec.worker_id).write_text(traceback.format_exc())
        raise SystemExit(1) from None


class _Worker:
    """One worker process: its setup (the store, its environments, the candidate space, the
    compile pool, the watch on its supervisor) and its claim loop."""

    def __init__(self, spec: WorkerSpec, shared: WorkerShared) -> None:
        self.spec, self.shared = spec, shared
        self.store = connect(spec.db_url)
        self.claim_lock = threading.Lock()
        if spec.parent_pid is not None:
            threading.Thread(target=self.watch_parent, daemon=True).start()
        # Each family's trials are recorded with its own kernel's hash.
        self.environments: dict[str, int] = {}
        # each task's family's space (vLLM's grid), unless configs are named
        self.space = None if spec.configs is None else list(spec.configs)
        self.compiler = None
        if spec.runner.on_gpu and spec.compile_workers > 0:
            self.compiler = CompileAhead.for_this_gpu(spec.compile_workers, shared)

    def watch_parent(self) -> None:
        """End the worker when its supervisor dies, its task handed back under the claim lock
        (so the loop cannot claim a new task in between and leave it leased to no one)."""
        while os.getppid() == self.spec.parent_pid:
            time.sleep(0.25)
        self.claim_lock.acquire()
        try:
            self.in_session(repo.release_tasks, deadline_s=5.0, worker_id=self.spec.worker_id)
        finally:
            os._exit(EXIT_PARENT_GONE)  # at once: the trial in flight is lost, the rest is stored

    def in_session(self, function, deadline_s: float | None = None, **kwargs):
        """`function(session, **kwargs)` in one transaction, retried while the store is down."""

        def step():
            with session_scope(self.store) as session:
                return function(session, **kwargs)

        return retry_store(step, url=self.spec.db_url, deadline_s=deadline_s)

    def environment_for(self, family: str) -> int:
        """The environment a family's trials are recorded with (its kernel's hash), told to
        the supervisor."""
        if family not in self.environments:
            env: dict[str, Any] = self.spec.runner.environment(self.spec.kernel, family)
            self.environments[family] = self.in_session(repo.get_or_create_environment, **env)
        self.shared.environment_id.value = self.environments[family]
        return self.environments[family]

    def claim_loop(self) -> None:
        """Claim and run tasks until none is left in scope; wait out leases of tasks that
        workers which may have died still hold.

        Raises:
            ContextLost: a crashed trial, or a failed task, on a GPU: a sticky CUDA error would
                fail every later task of this process at once, so a fresh process takes them.
        """
        spec, scope = self.spec, self.spec.scope

        def claim():
            with self.claim_lock, session_scope(self.store) as session:
                task = repo.claim_task(
                    session, worker_id=spec.worker_id, lease_s=spec.lease_s, **scope
                )
                return task, repo.unfinished_tasks(session, **scope)

        while True:
            task, unfinished = retry_store(claim, url=spec.db_url)
            if task is None:
                if unfinished == 0:
                    return
                time.sleep(min(5.0, spec.lease_s / 4))
                continue
            error = self.run_claimed(task)
            if error is TaskLost:
                continue  # the task was taken from this worker: another worker has it now
            state = repo.TaskState.DONE if error is None else repo.TaskState.FAILED
            self.in_session(
                repo.finish_task,
                task_id=task.task_id,
                worker_id=spec.worker_id,
                state=state,
                error=error,
            )
            if error is not None and spec.runner.on_gpu:
                raise ContextLost(error)

    def run_claimed(self, task) -> str | type[TaskLost] | None:
        """Run one claimed task under a heartbeat, again while the store has a transient
        outage (stored trials are not measured again), up to the store's deadline.

        Returns:
            None when done, the error's line when it failed, TaskLost when it was taken from
            this worker.

        Raises:
            ContextLost: a crashed trial on a GPU.
            db.connection.StoreUnavailable: the store stayed down past its deadline.
        """
        spec = self.spec
        lease = Lease(self.store, task.task_id, spec.worker_id, spec.lease_s)
        environment_id = self.environment_for(task.family)
        args = (self.store, spec, task, environment_id, self.space, self.shared, self.compiler)
        stopped = lease.heartbeat()
        try:
            try:  # a store error is never the task's: the task is run again
                retry_store(lambda: TaskRun(*args, lease).run(), url=spec.db_url)
            except (DBAPIError, PoolTimeoutError) as exc:  # not transient
                raise StoreUnavailable(describe_store_error(exc, spec.db_url)) from exc
        except TaskLost:
            return TaskLost
        except (ContextLost, StoreUnavailable):
            raise
        except Exception as exc:  # noqa: BLE001 - the task is marked failed, the worker goes on
            return f"{type(exc).__name__}: {exc}"[:1000]
        finally:
            stopped.set()
        return None
