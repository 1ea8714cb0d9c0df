"""One claimed task, searched: vLLM's default first, then the sweep's strategy from its warm
starts, every trial recorded as it finishes; then the finalists re-timed and the winner kept.

The worker marks each config in flight before measuring it, in memory shared with its
supervisor (`WorkerShared.mark_in_flight`), and clears the mark once the trial is stored, so the
supervisor can blame a crash or a hang on that config (tuner.run.supervisor). Whether the worker
still holds its task is asked of its lease (`tuner.run.lease.Lease.holds`: from memory while the
last renewal is recent), so a trial costs one store transaction, the one that records it.
"""

from __future__ import annotations

import os
import time
import zlib
from typing import TYPE_CHECKING

from tuner.run.lease import Lease
from tuner.run.spec import (
    FAULT_CRASH_ENV,
    FAULT_HANG_ENV,
    MEASURE_LOG_ENV,
    TRIAL_SLEEP_ENV,
    ContextLost,
    TaskLost,
    WorkerShared,
    WorkerSpec,
)

if TYPE_CHECKING:
    from tuner.run.compile_gate import WorkerCompiler

# Successive halving of measurement effort, in two rungs: every candidate of the search is
# timed briefly (about 20 samples of ~1 ms graph replays, against do_bench's 100 ms), and the
# finalists (tuner.measure.noise.select_for_retime: the fastest few and the default) are re-timed
# interleaved for RETIME_ROUNDS more samples each before a winner is kept. At 128 candidates per
# task the search's GPU time per trial drops from ~125 ms to ~25 ms of timing (estimated from
# these budgets; not yet measured on a GPU).
SEARCH_WARMUP_S = 0.005


SEARCH_REP_S = 0.020


def task_seed(sweep_seed: int, N: int, K: int, M: int) -> int:
    """Seed of one task's search: stable for the same sweep seed and shape, whatever the store."""
    return zlib.crc32(f"{sweep_seed}:{N}:{K}:{M}".encode())


def _labels(variable: str) -> set[str]:
    return {label.strip() for label in os.environ.get(variable, "").split(";") if label.strip()}


def _inject_fault(label: str) -> None:
    """The test hooks: crash or hang on the listed configs (TUNER_FAULT_*), or slow every
    measurement down (TUNER_TEST_TRIAL_SLEEP_S)."""
    delay_s = os.environ.get(TRIAL_SLEEP_ENV)
    if delay_s:
        time.sleep(float(delay_s))
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
             shared: WorkerShared | None = None, compiler: WorkerCompiler | None = None,
             lease: Lease | None = None) -> None:
    """Search one claimed task: time vLLM's default config (its kernel family's, at the task's
    M), then run the sweep's strategy,
    warm-started from vLLM's default and the winners the store knows for the device
    (`tuner.search.warm_start_for_task`: neighbouring M of the same shape, same M of
    other shapes).

    Trials already in the store for this task (a resumed run) are answered from the store and
    not measured again; new ones are recorded as they finish, so a kill loses at most one.
    A resumed task takes its warm starts from the tasks finished before its first trial, as
    its first run did, so a killed sweep resumes into the trials of an uninterrupted one, and
    an extended one (a larger budget, `db.sweeps.open_sweep`) measures only the trials an
    uninterrupted search at the larger budget adds (for strategies whose first trials do not
    depend on the budget: local, optuna, grid). A resumed task never stores more distinct
    configs than the budget allows (`trial_cap`; trials the strategy does not count, such as
    the pruned ones of `ils`, aside): a search that asks for more stops there.

    Args:
        engine: the store's engine.
        spec: this worker.
        task: the claimed task (`repo.TaskInfo`).
        environment_id: the environment trials are recorded with.
        space: the candidate configs; None for the task's family's space (vLLM's grid).
        shared: counters shared with the supervisor, if any.
        compiler: CUDA only: compiles candidates for the GPU ahead of time and prunes those
            that cannot launch (None: no pruning).
        lease: the task's lease, renewed by the worker's heartbeat; None for one of its own
            (renewed when the search starts, then whenever the last renewal is old).

    Raises:
        TaskLost: the task was taken from this worker; nothing more was recorded for it.
        ContextLost: a config crashed on CUDA; its trial is recorded, the process must restart.
    """
    from db import repo
    from db.engine import session_scope
    from db.faults import retry_store
    from tuner.kernels.config import KernelConfig
    from tuner.kernels.family import Shape
    from tuner.kernels.registry import get_family
    from tuner.measure.runner import KernelRunner, Problem
    from tuner.measure.trial import TrialResult, TrialStatus
    from tuner.search import get_strategy, planned, warm_start_for_task
    from tuner.search.replay import ReplayRunner, cached_landscape

    if lease is None:
        lease = Lease(engine, task.task_id, spec.worker_id, spec.lease_s)
    lost = f"task {task.task_id} is no longer held by {spec.worker_id}"
    with session_scope(engine) as session:
        if not lease.renew(session):
            raise TaskLost(lost)
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
                                  finished_before=first_trial_at, family=task.family,
                                  shape_params=task.shape_params)
    family = get_family(task.family)
    shape = Shape.from_store(task.N, task.K, task.block_shape, task.shape_params)
    space = list(space) if space is not None else family.space()
    problem = Problem(task.M, task.N, task.K, shape.block_shape, task.out_dtype,
                      family=family.name, params=shape.params, kernel=spec.kernel)
    seed = task_seed(task.seed, *_nkm(task))
    if spec.backend == "replay":
        runner: ReplayRunner | KernelRunner = cached_landscape(spec.replay_landscape()).runner(
            task.N, task.K, task.M)
    else:
        runner = KernelRunner(problem, backend=spec.backend, seed=seed,
                              interpreter_reps=spec.interpreter_reps,
                              warmup_s=SEARCH_WARMUP_S, rep_s=SEARCH_REP_S)
    default = family.default_config(shape, task.M)
    warm = warm_start_for_task(
        [(w.N, w.K, w.M, KernelConfig.from_dict(w.config)) for w in known],
        N=task.N, K=task.K, M=task.M, default=default,
    )
    held = {"task_id": task.task_id, "worker_id": spec.worker_id}
    nkm = _nkm(task)

    cap = trial_cap(task.budget, space, default) if done else None
    strategy = get_strategy(task.strategy)
    gate = None
    if compiler is not None:  # compiled first: what the search asks first whatever the results
        first = planned(strategy, space=space, budget=task.budget, seed=seed,
                        warm_start=warm)
        gate = compiler.gate(problem, space, [c for c in first if c not in done])
    free = strategy.free  # statuses its budget does not count

    def evaluate(config: KernelConfig) -> TrialResult:
        if config in done:
            return done[config]
        if cap is not None and sum(r.status not in free for r in done.values()) >= cap:
            raise _BudgetSpent
        if not lease.holds():
            raise TaskLost(lost)
        values, is_default = config.as_dict(), config == default
        if shared is not None:
            shared.mark_in_flight(task.task_id, nkm, values, is_default, time.time())
        try:
            label = config.short()
            _log_measure("start", task.task_id, label)
            _inject_fault(label)
            result = gate.before(config) if gate is not None else None
            pruned = result is not None
            if result is None:
                result = runner.evaluate(config)
            if gate is not None:
                gate.after(config, result)
            def record() -> bool:
                with engine.begin() as connection:  # the trial's one transaction
                    return repo.record_held_trial(
                        connection, **held, environment_id=environment_id, config=values,
                        is_default=is_default, status=result.status.value,
                        latency_us=result.latency_us, p20_us=result.p20_us,
                        p80_us=result.p80_us, rel_error=result.rel_error, error=result.error,
                        measure_s=result.measure_s,
                    )

            # A store that failed (restart, failover, lock) is retried with the result in
            # hand: the measurement is not lost, and a record whose commit was lost in flight
            # is stored once (idempotent).
            if not retry_store(record, url=spec.db_url):
                raise TaskLost(f"task {task.task_id} was taken from {spec.worker_id}")
        finally:
            if shared is not None:
                shared.clear_in_flight()
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
        strategy.search(
            evaluate, space=space, budget=task.budget,
            seed=seed, warm_start=warm,
        )
    except _BudgetSpent:
        pass
    finally:
        if compiler is not None and gate is not None:
            compiler.closed(gate, shared)
    _retime_and_decide(engine, spec, task, environment_id, runner, done, default)


class _BudgetSpent(Exception):
    """A resumed search asked for a config beyond the task's budget (see `trial_cap`)."""


def trial_cap(budget: int, space, default) -> int:
    """Most distinct configs a task stores: the budget within the space, plus vLLM's default
    when it is outside the space (every task measures it).

    Args:
        budget: the sweep's trials per task.
        space: the task's candidate configs.
        default: vLLM's default config at the task's M.

    Returns:
        min(budget, distinct configs of the space) + (1 if the default is not in the space).
    """
    allowed = set(space)
    return min(budget, len(allowed)) + (default not in allowed)


def _retime_and_decide(engine, spec: WorkerSpec, task, environment_id: int, runner,
                       done: dict, default) -> None:
    """Re-time the fastest configs and the default interleaved, and store the config kept
    (`tuner.measure.noise.decide_winner`: the fastest only if it beats the runner-up by more
    than the measured spread). A task whose decision re-timed the finalists its trials give
    now (resumed after its re-timing was stored) is not re-timed; one whose finalists changed
    (an extended task that found faster configs) is re-timed and its decision replaced.
    Nothing is stored for a task without an ok trial.

    Raises:
        TaskLost: the task was taken from this worker; its decision was not stored.
    """
    from db import repo
    from db.engine import session_scope
    from db.faults import retry_store
    from tuner.kernels.config import KernelConfig
    from tuner.measure.noise import (
        RETIME_ROUNDS,
        decide_winner,
        retime_interleaved,
        select_for_retime,
    )

    finalists = select_for_retime(done, default)
    if not finalists:
        return
    with session_scope(engine) as session:
        decided = repo.task_decision(session, task_id=task.task_id)
    if decided is not None and ({KernelConfig.from_dict(r.config) for r in decided.retimes}
                                == set(finalists)):
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
    def record() -> bool:
        with session_scope(engine) as session:
            return repo.record_decision(session, task_id=task.task_id,
                                        worker_id=spec.worker_id,
                                        environment_id=environment_id, retimes=rows,
                                        decision=kept)

    if not retry_store(record, url=spec.db_url):  # the re-timing is kept through an outage
        raise TaskLost(f"task {task.task_id} was taken from {spec.worker_id}")


def _nkm(task) -> tuple[int, int, int]:
    return task.N, task.K, task.M
