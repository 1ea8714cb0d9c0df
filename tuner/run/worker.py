"""Worker process: claims tasks of a sweep from the store, searches each, records every trial.

Before measuring a config the worker marks it in flight on its task (`repo.start_trial`); it
clears the mark in the transaction that records the trial. Its supervisor (tuner.run.supervisor)
reads the mark when the worker dies or hangs and records that config as crashed or timed out.

Test hooks (environment variables, read in the worker process):
    TUNER_FAULT_CRASH: `os.abort()` instead of measuring a config whose `KernelConfig.short()`
        label is listed (labels separated by ';'), like a kernel that kills its process.
    TUNER_FAULT_HANG: sleep forever instead of measuring such a config, like a kernel that
        never returns.
    TUNER_TEST_MEASURE_LOG: append `pid, start|done, task_id, label` (tab-separated) to this
        file when a measurement starts and when its trial is stored.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
import zlib
from dataclasses import dataclass

# torch, triton and the kernel are imported inside the worker process, after the environment
# (CUDA_VISIBLE_DEVICES or TRITON_INTERPRET) is set: this module is imported by the parent too.

FAULT_CRASH_ENV = "TUNER_FAULT_CRASH"
FAULT_HANG_ENV = "TUNER_FAULT_HANG"
MEASURE_LOG_ENV = "TUNER_TEST_MEASURE_LOG"
# Exit codes of a worker besides 0 (no task left) and 130 (Ctrl-C).
EXIT_PARENT_GONE = 3  # its supervisor died; it handed its task back
EXIT_RESTART = 4  # a crashed trial on CUDA: the context may be broken; start a fresh process


# Successive halving of measurement effort, in two rungs: every candidate of the search is
# timed briefly (about 20 samples of ~1 ms graph replays, against do_bench's 100 ms), and the
# finalists (tuner.measure.noise.select_for_retime: the fastest few and the default) are re-timed
# interleaved for RETIME_ROUNDS more samples each before a winner is kept. At 128 candidates per
# task the search's GPU time per trial drops from ~125 ms to ~25 ms of timing (estimated from
# these budgets; not yet measured on a GPU).
SEARCH_WARMUP_S = 0.005
SEARCH_REP_S = 0.020


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
            GPU's architecture while it measures (`tuner.measure.precompile`); 0 compiles nothing
            ahead
            and prunes nothing (Triton compiles at first launch).
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


def task_seed(sweep_seed: int, N: int, K: int, M: int) -> int:
    """Seed of one task's search: stable for the same sweep seed and shape, whatever the store."""
    return zlib.crc32(f"{sweep_seed}:{N}:{K}:{M}".encode())


def collect_environment(backend: str) -> dict[str, str]:
    """GPU, versions and kernel hash of this process, as `db.repo.get_or_create_environment` takes.

    On the interpreter, gpu_name and device_name are TRITON_INTERPRETER and driver/CUDA are "".
    """
    import torch
    import triton

    import tuner
    from tuner.inputs.devices import INTERPRETER_DEVICE_NAME, vllm_device_name
    from tuner.kernels.dense.kernel import kernel_source_hash

    env = {
        "torch": torch.__version__,
        "triton": triton.__version__,
        "tuner": tuner.__version__,
        "kernel_hash": kernel_source_hash(),
        "driver": "",
        "cuda": "",
        "compute_capability": "",
    }
    if backend == "interpreter":
        return {**env, "gpu_name": INTERPRETER_DEVICE_NAME, "device_name": INTERPRETER_DEVICE_NAME}
    name = torch.cuda.get_device_name()
    major, minor = torch.cuda.get_device_capability()
    env.update(
        gpu_name=name,
        device_name=vllm_device_name(name),
        compute_capability=f"{major}.{minor}",
        cuda=torch.version.cuda or "",
        driver=_driver_version(),
    )
    return env


def _driver_version() -> str:
    if shutil.which("nvidia-smi") is None:
        return ""
    query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader", "-i", "0"]
    try:
        return subprocess.run(query, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


class _Heartbeat(threading.Thread):
    """Renews a task's lease while the worker measures it."""

    def __init__(self, engine, task_id: int, worker_id: str, lease_s: float) -> None:
        super().__init__(daemon=True)
        self.engine, self.task_id = engine, task_id
        self.worker_id, self.lease_s = worker_id, lease_s
        self.stopped = threading.Event()

    def run(self) -> None:
        from db import repo
        from db.engine import session_scope

        while not self.stopped.wait(self.lease_s / 4):
            try:
                with session_scope(self.engine) as session:
                    repo.heartbeat(session, task_id=self.task_id, worker_id=self.worker_id,
                                   lease_s=self.lease_s)
            except Exception:  # noqa: BLE001 - a missed beat is retried; the lease has slack
                continue


class _ParentWatch(threading.Thread):
    """Ends the worker when the sweep process that started it dies (SIGKILL, SIGTERM, crash).

    It holds `claim_lock` from handing the task back to the exit, so the worker's loop (which
    claims under that lock) cannot take a new task in between and leave it leased to no one.
    """

    def __init__(self, engine, spec: WorkerSpec, claim_lock: threading.Lock) -> None:
        super().__init__(daemon=True)
        self.engine, self.spec, self.claim_lock = engine, spec, claim_lock

    def run(self) -> None:
        from db import repo
        from db.engine import session_scope

        while os.getppid() == self.spec.parent_pid:
            time.sleep(0.25)
        self.claim_lock.acquire()
        try:
            with session_scope(self.engine) as session:
                repo.release_tasks(session, worker_id=self.spec.worker_id)
        finally:
            os._exit(EXIT_PARENT_GONE)  # at once: the trial in flight is lost, the rest is stored


def _labels(variable: str) -> set[str]:
    return {label.strip() for label in os.environ.get(variable, "").split(";") if label.strip()}


def _inject_fault(label: str) -> None:
    """The TUNER_FAULT_* test hooks: crash or hang on the listed configs."""
    if label in _labels(FAULT_CRASH_ENV):
        os.abort()
    if label in _labels(FAULT_HANG_ENV):
        while True:
            time.sleep(3600)


def _log_measure(event: str, task_id: int, label: str) -> None:
    path = os.environ.get(MEASURE_LOG_ENV)
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:  # one write of one short line: appends from several processes do not interleave
        os.write(fd, f"{os.getpid()}\t{event}\t{task_id}\t{label}\n".encode())
    finally:
        os.close(fd)


def run_task(engine, spec: WorkerSpec, task, environment_id: int, space,
             shared: WorkerShared | None = None, compiler: _Compiler | None = None) -> None:
    """Search one claimed task: time vLLM's default config, then run the sweep's strategy,
    warm-started from vLLM's default and the winners the store knows for the device
    (`tuner.search.warm_start_for_task`: neighbouring M of the same shape, same M of
    other shapes).

    Trials already in the store for this task (a resumed run) are answered from the store and
    not measured again; new ones are recorded as they finish, so a kill loses at most one.
    A resumed task takes its warm starts from the tasks finished before its first trial, as
    its first run did, so a killed sweep resumes into the trials of an uninterrupted one.

    Args:
        engine: the store's engine.
        spec: this worker.
        task: the claimed task (`repo.TaskInfo`).
        environment_id: the environment trials are recorded with.
        space: the candidate configs.
        shared: counters shared with the supervisor, if any.
        compiler: CUDA only: compiles candidates for the GPU ahead of time and prunes those
            that cannot launch (None: no pruning).

    Raises:
        TaskLost: the task was taken from this worker; nothing more was recorded for it.
        ContextLost: a config crashed on CUDA; its trial is recorded, the process must restart.
    """
    from db import repo
    from db.engine import session_scope
    from tuner.kernels.config import KernelConfig
    from tuner.kernels.dense.space import default_config
    from tuner.measure.runner import KernelRunner, Problem
    from tuner.measure.trial import TrialResult, TrialStatus
    from tuner.search import get_strategy, warm_start_for_task
    from tuner.search.replay import load_landscape

    with session_scope(engine) as session:
        stored = repo.task_trials(session, task_id=task.task_id)
        done = {
            KernelConfig.from_dict(t.config): TrialResult(
                TrialStatus(t.status), t.latency_us, t.p20_us, t.p80_us, t.rel_error, t.error,
                t.measure_s,
            )
            for t in stored
        }
        first_trial_at = min((t.created_at for t in stored if t.created_at), default=None)
        known = repo.task_winners(session, device_name=task.device_name,
                                  block_shape=tuple(task.block_shape), out_dtype=task.out_dtype,
                                  finished_before=first_trial_at)
    problem = Problem(task.M, task.N, task.K, tuple(task.block_shape), task.out_dtype)
    if spec.backend == "replay":
        runner = load_landscape(spec.landscape_path).runner(task.N, task.K, task.M)
    else:
        runner = KernelRunner(problem, backend=spec.backend,
                              seed=task_seed(task.seed, *_nkm(task)),
                              interpreter_reps=spec.interpreter_reps,
                              warmup_s=SEARCH_WARMUP_S, rep_s=SEARCH_REP_S)
    default = default_config(problem.block_shape)
    warm = warm_start_for_task(
        [(w.N, w.K, w.M, KernelConfig.from_dict(w.config)) for w in known],
        N=task.N, K=task.K, M=task.M, default=default,
    )
    gate = compiler.gate(problem, space, warm) if compiler is not None else None
    held = {"task_id": task.task_id, "worker_id": spec.worker_id}

    def evaluate(config: KernelConfig) -> TrialResult:
        if config in done:
            return done[config]
        with session_scope(engine) as session:
            if not repo.start_trial(session, **held, config=config.as_dict()):
                raise TaskLost(f"task {task.task_id} is no longer held by {spec.worker_id}")
        label = config.short()
        _log_measure("start", task.task_id, label)
        _inject_fault(label)
        result = gate.before(config) if gate is not None else None
        pruned = result is not None
        if result is None:
            result = runner.evaluate(config)
        if gate is not None:
            gate.after(config, result)
        with session_scope(engine) as session:
            if not repo.end_trial(session, **held):  # raising rolls the record back
                raise TaskLost(f"task {task.task_id} was taken from {spec.worker_id}")
            repo.record_trial(
                session, task_id=task.task_id, environment_id=environment_id,
                config=config.as_dict(), is_default=config == default, status=result.status.value,
                latency_us=result.latency_us, p20_us=result.p20_us, p80_us=result.p80_us,
                rel_error=result.rel_error, error=result.error, measure_s=result.measure_s,
            )
        _log_measure("done", task.task_id, label)
        if shared is not None:
            shared.trials_stored.value += 1
            shared.trials_pruned.value += pruned
            shared.measure_s.value += result.measure_s or 0.0
        done[config] = result
        if spec.backend == "cuda" and result.status is TrialStatus.CRASHED:
            raise ContextLost(result.error or "crashed")
        return result

    try:
        evaluate(default)  # the baseline of every task, whatever the strategy
        get_strategy(task.strategy).search(
            evaluate, space=space, budget=task.budget,
            seed=task_seed(task.seed, *_nkm(task)), warm_start=warm,
        )
    finally:
        if gate is not None:
            compiler.closed(gate, shared)
    _retime_and_decide(engine, spec, task, environment_id, runner, done, default)


def _retime_and_decide(engine, spec: WorkerSpec, task, environment_id: int, runner,
                       done: dict, default) -> None:
    """Re-time the fastest configs and the default interleaved, and store the config kept
    (`tuner.measure.noise.decide_winner`: the fastest only if it beats the runner-up by more than
    the
    measured spread). A task that already has a decision (resumed after its re-timing was
    stored) is not re-timed. Nothing is stored for a task without an ok trial.

    Raises:
        TaskLost: the task was taken from this worker; its decision was not stored.
    """
    from db import repo
    from db.engine import session_scope
    from tuner.measure.noise import (
        RETIME_ROUNDS,
        decide_winner,
        retime_interleaved,
        select_for_retime,
    )

    with session_scope(engine) as session:
        if repo.task_decision(session, task_id=task.task_id) is not None:
            return
    finalists = select_for_retime(done, default)
    if not finalists:
        return
    # The interpreter's timings are CPU timings of a development backend: as many rounds as
    # its timed calls per trial, not a GPU's count.
    rounds = max(2, spec.interpreter_reps) if spec.backend == "interpreter" else RETIME_ROUNDS
    retimes = retime_interleaved(runner.sample_us, finalists, rounds=rounds)
    decision = decide_winner(retimes, default)
    rows = [
        {"config": r.config.as_dict(), "is_default": r.config == default, "rounds": r.rounds,
         "latency_us": r.latency_us, "p20_us": r.p20_us, "p80_us": r.p80_us}
        for r in retimes
    ]
    kept = {
        "config": decision.config.as_dict(), "latency_us": decision.latency_us,
        "default_latency_us": decision.default_latency_us,
        "runner_up": None if decision.runner_up is None else decision.runner_up.as_dict(),
        "spread_us": decision.spread_us, "kept": decision.kept, "note": decision.note,
    }
    with session_scope(engine) as session:
        if not repo.record_decision(session, task_id=task.task_id, worker_id=spec.worker_id,
                                    environment_id=environment_id, retimes=rows,
                                    decision=kept):
            raise TaskLost(f"task {task.task_id} was taken from {spec.worker_id}")


class _Compiler:
    """A CUDA worker's precompile pool, shared by its tasks: one `CompileGate` per task.

    A pool that lost a process (`Precompiler.broken`) takes no more work; it is replaced when
    the task that saw it ends, so one dead compile process does not leave every later task
    without precompiling and pruning.
    """

    def __init__(self, workers: int, arch: int) -> None:
        from tuner.measure.compile import compile_pool

        self.arch = arch
        self.workers = workers
        self.pool = compile_pool(workers)

    @classmethod
    def for_this_gpu(cls, workers: int) -> _Compiler | None:
        """The compiler for the visible GPU, or None (with a line saying so) when its
        architecture has no known resource limits (`tuner.measure.compile.MAX_SHARED_BYTES`):
        pruning
        would then fail every task, so Triton compiles at first launch instead."""
        import torch

        from tuner.measure.compile import MAX_SHARED_BYTES

        major, minor = torch.cuda.get_device_capability()
        arch = 10 * major + minor
        if arch not in MAX_SHARED_BYTES:
            print(f"no precompiling for sm{arch}: its resource limits are not known", flush=True)
            return None
        return cls(workers, arch)

    def gate(self, problem, space, warm):
        from tuner.run.compile_gate import CompileGate

        return CompileGate(arch=self.arch, M=problem.M, N=problem.N, K=problem.K,
                           block_shape=problem.block_shape, out_dtype=problem.out_dtype,
                           space=space, warm_start=warm, pool=self.pool, workers=self.workers)

    def closed(self, gate, shared: WorkerShared | None) -> None:
        from tuner.measure.compile import compile_pool

        stats = gate.close()
        if shared is not None:
            shared.compile_s.value += stats.compile_s
            shared.compile_wait_s.value += stats.wait_s
        if gate.precompiler.broken:
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool = compile_pool(self.workers)


def _record_ceilings(engine, environment_id: int) -> None:
    """Measure this GPU's copy bandwidth and FP8-mm throughput (`tuner.measure.roofline`) and store
    them with the environment, for the roofline ratios of its winners. A failure is reported
    and the worker goes on: the ratios are then left out."""
    from db import repo
    from db.engine import session_scope
    from tuner.measure.roofline import ceiling_details, measure_ceilings

    try:
        ceilings = measure_ceilings("cuda")
    except Exception as exc:  # noqa: BLE001 - ceilings are a report's extra, not the job
        print(f"ceilings not measured: {type(exc).__name__}: {exc}", flush=True)
        return
    with session_scope(engine) as session:
        repo.record_ceilings(session, environment_id=environment_id, ceilings=ceilings,
                             details=ceiling_details("cuda"))


def _nkm(task) -> tuple[int, int, int]:
    return task.N, task.K, task.M


def worker_main(spec: WorkerSpec, shared: WorkerShared | None = None) -> None:
    """Entry point of a worker process: claim and run tasks until none is left.

    Sets CUDA_VISIBLE_DEVICES (cuda) or TRITON_INTERPRET=1 (interpreter) before torch and triton
    are imported, so a spawned process sees one GPU, or runs the kernel on the CPU interpreter.
    Exits with EXIT_RESTART after a crashed trial on CUDA, so that its supervisor starts a
    fresh process (and CUDA context) for the rest of the task.

    Args:
        spec: what to claim and how to measure.
        shared: counters shared with the supervisor, if any.
    """
    try:
        _work(spec, shared)
    except KeyboardInterrupt:  # Ctrl-C reaches the whole process group; the parent cleans up
        raise SystemExit(130) from None


def _work(spec: WorkerSpec, shared: WorkerShared | None) -> None:
    if spec.backend == "interpreter":
        os.environ["TRITON_INTERPRET"] = "1"
    elif spec.visible_device is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = spec.visible_device

    from db import repo
    from db.engine import make_engine, session_scope
    from tuner.kernels.config import KernelConfig
    from tuner.kernels.dense.space import vllm_space

    engine = make_engine(spec.db_url)
    claim_lock = threading.Lock()
    if spec.parent_pid is not None:
        _ParentWatch(engine, spec, claim_lock).start()
    if spec.backend == "replay":
        from tuner.search.replay import load_landscape

        landscape = load_landscape(spec.landscape_path)
        env = {**landscape.environment, "device_name": landscape.device_name}
    else:
        env = collect_environment(spec.backend)
    with session_scope(engine) as session:
        environment_id = repo.get_or_create_environment(session, **env)
    if spec.backend == "cuda":
        _record_ceilings(engine, environment_id)
    if shared is not None:
        shared.environment_id.value = environment_id
    if spec.configs is not None:
        space = [KernelConfig.from_dict(dict(items)) for items in spec.configs]
    else:
        space = vllm_space()
    scope = {"sweep_id": spec.sweep_id, "device_name": spec.device_name, "space": spec.space}
    compiler = None
    if spec.backend == "cuda" and spec.compile_workers > 0:
        compiler = _Compiler.for_this_gpu(spec.compile_workers)
    while True:
        with claim_lock, session_scope(engine) as session:
            task = repo.claim_task(session, worker_id=spec.worker_id, lease_s=spec.lease_s,
                                   **scope)
            unfinished = repo.unfinished_tasks(session, **scope)
        if task is None:
            if unfinished == 0:
                return
            # Tasks leased by workers that may have died (a killed earlier run): wait for the
            # lease to expire, then claim them.
            time.sleep(min(5.0, spec.lease_s / 4))
            continue
        beat = _Heartbeat(engine, task.task_id, spec.worker_id, spec.lease_s)
        beat.start()
        try:
            run_task(engine, spec, task, environment_id, space, shared, compiler)
            state, error = "done", None
        except TaskLost:
            continue  # another worker has it now
        except ContextLost:
            with session_scope(engine) as session:
                repo.release_tasks(session, worker_id=spec.worker_id)
            raise SystemExit(EXIT_RESTART) from None
        except Exception as exc:  # noqa: BLE001 - the task is marked failed, the worker goes on
            state, error = "failed", f"{type(exc).__name__}: {exc}"[:1000]
        finally:
            beat.stopped.set()
        with session_scope(engine) as session:
            repo.finish_task(session, task_id=task.task_id, worker_id=spec.worker_id,
                             state=state, error=error)
        if state == "failed" and spec.backend == "cuda" and not _cuda_usable():
            # A sticky CUDA error raised outside a trial (re-timing, inputs): every later task
            # of this process would fail at once. The failed task stays failed; a fresh process
            # takes the others.
            raise SystemExit(EXIT_RESTART)


def _cuda_usable() -> bool:
    """Whether this process's CUDA context still runs work (a sticky error such as an illegal
    memory access makes every later call raise)."""
    import torch

    try:
        torch.cuda.synchronize()
    except RuntimeError:
        return False
    return True
