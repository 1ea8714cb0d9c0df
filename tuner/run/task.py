"""One claimed task, searched: vLLM's default first, then the sweep's strategy from its warm
starts, every trial recorded as it finishes; then the finalists re-timed and the winner kept.

The worker marks each config in flight before measuring it, in memory shared with its
supervisor (`WorkerShared.mark_in_flight`), and clears the mark once the trial is stored, so the
supervisor can blame a crash or a hang on that config (tuner.run.supervisor). Whether the worker
still holds its task is asked of its lease (`tuner.run.lease.Lease.holds`: from memory while the
last renewal is recent), so a trial costs one store transaction, the one that records it.
"""

from __future__ import annotations

import time
import zlib
from typing import TYPE_CHECKING

from db import repo
from db.repo import retry_store, session_scope
from tuner.core import TrialStatus
from tuner.kernels.config import KernelConfig
from tuner.kernels.registry import get_family
from tuner.kernels.shape import FamilyShape
from tuner.measure.noise import RETIME_ROUNDS, decide_winner, retime_interleaved, select_for_retime
from tuner.measure.runner import Problem
from tuner.measure.trial import TrialResult
from tuner.run.lease import Lease
from tuner.run.worker_spec import (
    ContextLost,
    TaskLost,
    WorkerShared,
    WorkerSpec,
)
from tuner.search.registry import get_strategy
from tuner.search.warm_start import related as related_timings
from tuner.search.warm_start import warm_start_for_task

if TYPE_CHECKING:
    from tuner.measure.runners import ProblemRunner
    from tuner.run.compile_gate import CompileGate, WorkerCompiler

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


class TaskRun:
    """One claimed task, searched in named steps (`run` calls them in order):

    - `resume`: the trials the store already has for the task, and the winners and related
      tasks' trials known when its first trial was stored (its warm starts and what its
      strategy may learn from, the same on every resumption);
    - `plan`: the runner, vLLM's default config, the warm starts, the strategy and, for a
      resumed task, the cap on its trials;
    - `open_gate`: compiles for the GPU what the search asks first, pruning what cannot launch;
    - `evaluate` (the search's objective): `measure` one config, `record` its trial;
    - `decide`: re-time the finalists and store the config kept.

    Trials already in the store (a resumed run) are answered from the store and not measured
    again; new ones are recorded as they finish, so a kill loses at most one. A resumed task
    takes its warm starts (and its related trials) from the tasks finished before its first
    trial, as its first run did, so a killed sweep resumes into the trials of an uninterrupted
    one, and an extended one (a larger budget, `db.repo.open_sweep`) measures only the
    trials an uninterrupted search at the larger budget adds (no strategy's first trials
    depend on the budget). A resumed task never stores more distinct configs than the budget
    allows (`trial_cap`; trials the strategy does not count, such as the pruned ones of
    `guided`, aside): a search that asks for more stops there.

    Args:
        store: the store (its Engine).
        spec: this worker (its `runner` measures, its `options` give the lease).
        task: the claimed task (`repo.TaskInfo`).
        environment_id: the environment trials are recorded with.
        space: the candidate configs; None for the task's family's space (vLLM's grid).
        shared: counters shared with the supervisor, if any.
        compiler: GPU runners only: compiles candidates for the GPU ahead of time and prunes those
            that cannot launch (None: no pruning).
        lease: the task's lease, renewed by the worker's heartbeat; None for one of its own
            (renewed when the search starts, then whenever the last renewal is old).
    """

    def __init__(
        self,
        store,
        spec: WorkerSpec,
        task,
        environment_id: int,
        space=None,
        shared: WorkerShared | None = None,
        compiler: WorkerCompiler | None = None,
        lease: Lease | None = None,
    ) -> None:
        self.store, self.spec, self.task = store, spec, task
        self.environment_id, self.shared, self.compiler = environment_id, shared, compiler
        self.space: list = list(space or ())  # empty: the family's space, read by `plan`
        self.key = FamilyShape.of_row(task)  # the task's family and shape, read once
        self.lease = lease or Lease(store, task.task_id, spec.worker_id, spec.options.lease_s)
        self.lost = f"task {task.task_id} is no longer held by {spec.worker_id}"
        self.done: dict = {}  # KernelConfig -> TrialResult, stored and new
        self.gate: CompileGate | None = None
        self.runner: ProblemRunner
        self.related: list = []  # ok trials of the related tasks, one list per task

    def run(self) -> None:
        """Resume, plan, open the compile gate, search, decide.

        Raises:
            TaskLost: the task was taken from this worker; nothing more was recorded for it.
            ContextLost: a config crashed on a GPU; its trial is recorded, the process must
                restart.
        """
        known, related = self.resume()
        self.plan(known, related)
        self.open_gate()
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
            if self.compiler is not None and self.gate is not None:
                self.compiler.closed(self.gate, self.shared)
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
                raise TaskLost(self.lost)
            reused = repo.adopt_measurements(
                session, task_id=task.task_id, environment_id=self.environment_id
            )
            stored = repo.task_trials(session, task_id=task.task_id)
            self.done = {
                KernelConfig.from_dict(t.config): TrialResult(
                    TrialStatus(t.status),
                    t.latency_us,
                    t.p20_us,
                    t.p80_us,
                    t.rel_error,
                    t.error,
                    t.measure_s,
                )
                for t in stored
            }
            first_trial_at = min((t.created_at for t in stored if t.created_at), default=None)
            scope = dict(
                device_name=task.device_name,
                block_shape=task.block_shape,
                out_dtype=task.out_dtype,
                finished_before=first_trial_at,
                **self.key.store_fields(),
            )
            winners = repo.task_winners(session, **scope)
            related = (
                repo.related_trials(session, N=task.N, K=task.K, M=task.M, **scope)
                if get_strategy(task.strategy).reads_related
                else []
            )
        if self.shared is not None:
            self.shared.trials_reused.value += reused
        return winners, related

    def plan(self, known: list, related: list) -> None:
        """The space, problem, runner, default config, warm starts (from `known`, the store's
        winners), the related tasks' timings (from `related`, the store's trials), strategy
        and, for a resumed task, the trial cap."""

        task, spec = self.task, self.spec
        family, shape = get_family(self.key.family), self.key.shape
        if not self.space:
            self.space = family.space()
        self.problem = Problem(
            task.M,
            task.N,
            task.K,
            shape.block_shape,
            task.out_dtype,
            family=family.name,
            params=shape.params,
            kernel=spec.kernel,
        )
        self.seed = task_seed(task.seed, *_nkm(task))
        self.runner = spec.runner.problem_runner(
            self.problem,
            task_id=task.task_id,
            seed=self.seed,
            warmup_s=SEARCH_WARMUP_S,
            rep_s=SEARCH_REP_S,
        )
        self.default = family.default_config(shape, task.M)
        self.warm = warm_start_for_task(
            [(w.N, w.K, w.M, KernelConfig.from_dict(w.config)) for w in known],
            N=task.N,
            K=task.K,
            M=task.M,
            default=self.default,
        )
        timings: dict[tuple[int, int, int], list[tuple[KernelConfig, float]]] = {}
        for row in related:
            timings.setdefault((row.N, row.K, row.M), []).append(
                (KernelConfig.from_dict(row.config), row.latency_us)
            )
        self.related = related_timings((task.N, task.K, task.M), timings)
        self.strategy = get_strategy(task.strategy)
        self.free = self.strategy.free  # statuses its budget does not count
        self.cap = trial_cap(task.budget, self.space, self.default) if self.done else None

    def open_gate(self) -> None:
        """GPU runners only: start compiling what the search asks first, whatever the
        results."""

        if self.compiler is None:
            return
        first = self.strategy.planned(space=self.space, seed=self.seed, warm_start=self.warm)
        first = first[: self.task.budget]
        self.gate = self.compiler.gate(
            self.problem, self.space, [c for c in first if c not in self.done]
        )

    def evaluate(self, config):
        """The search's objective: the stored result of `config`, or a new trial measured and
        recorded (`tuner.measure.trial.TrialResult`).

        Raises:
            TaskLost: the task is no longer held.
            ContextLost: the config crashed on a GPU (its trial is recorded).
        """

        if config in self.done:
            return self.done[config]
        if (
            self.cap is not None
            and sum(r.status not in self.free for r in self.done.values()) >= self.cap
        ):
            raise _BudgetSpent
        if not self.lease.holds():
            raise TaskLost(self.lost)
        is_default = config == self.default
        if self.shared is not None:
            self.shared.mark_in_flight(
                self.task.task_id, _nkm(self.task), config.as_dict(), is_default, time.time()
            )
        try:
            result, pruned = self.measure(config)
            self.record(config, result, is_default)
        finally:
            if self.shared is not None:
                self.shared.clear_in_flight()
        self.spec.runner.stored(self.task.task_id, config)
        if self.shared is not None:
            self.shared.trials_stored.value += 1
            self.shared.trials_pruned.value += pruned
            self.shared.measure_s.value += result.measure_s or 0.0
        self.done[config] = result
        if self.spec.runner.on_gpu and result.status is TrialStatus.CRASHED:
            raise ContextLost(result.error or "crashed")
        return result

    def measure(self, config):
        """(the config's TrialResult, whether compile pruning answered it without a launch)."""
        result = self.gate.before(config) if self.gate is not None else None
        pruned = result is not None
        if result is None:
            result = self.runner.evaluate(config)
        if self.gate is not None:
            self.gate.after(config, result)
        return result, pruned

    def record(self, config, result, is_default: bool) -> None:
        """Store one trial in one transaction, fenced to this worker's hold on the task. A
        store that failed (restart, failover, lock) is retried with the result in hand: the
        measurement is not lost, and a record whose commit was lost in flight is stored once
        (idempotent).

        Raises:
            TaskLost: the task was taken from this worker; nothing was stored.
        """

        def step() -> bool:
            with self.store.begin() as connection:  # the trial's one transaction
                return repo.record_trial(
                    connection,
                    task_id=self.task.task_id,
                    worker_id=self.spec.worker_id,
                    environment_id=self.environment_id,
                    config=config.as_dict(),
                    is_default=is_default,
                    status=result.status.value,
                    latency_us=result.latency_us,
                    p20_us=result.p20_us,
                    p80_us=result.p80_us,
                    rel_error=result.rel_error,
                    error=result.error,
                    measure_s=result.measure_s,
                )

        if not retry_store(step, url=self.spec.db_url):
            raise TaskLost(f"task {self.task.task_id} was taken from {self.spec.worker_id}")

    def decide(self) -> None:
        """Re-time the finalists and store the config kept (`_retime_and_decide`)."""
        _retime_and_decide(
            self.store,
            self.spec,
            self.task,
            self.environment_id,
            self.runner,
            self.done,
            self.default,
        )


def run_task(
    store,
    spec: WorkerSpec,
    task,
    environment_id: int,
    space,
    shared: WorkerShared | None = None,
    compiler: WorkerCompiler | None = None,
    lease: Lease | None = None,
) -> None:
    """Search one claimed task: `TaskRun(...).run()` (its arguments are `TaskRun`'s).

    Raises:
        TaskLost: the task was taken from this worker; nothing more was recorded for it.
        ContextLost: a config crashed on a GPU; its trial is recorded, the process must
            restart.
    """
    TaskRun(store, spec, task, environment_id, space, shared, compiler, lease).run()


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


def _retime_and_decide(
    store, spec: WorkerSpec, task, environment_id: int, runner, done: dict, default
) -> None:
    """Re-time the fastest configs and the default interleaved, and store the config kept
    (`tuner.measure.noise.decide_winner`: the fastest only if it beats the runner-up by more
    than the measured spread). A task whose decision re-timed the finalists its trials give
    now (resumed after its re-timing was stored) is not re-timed; one whose finalists changed
    (an extended task that found faster configs) is re-timed and its decision replaced.
    Nothing is stored for a task without an ok trial.

    Raises:
        TaskLost: the task was taken from this worker; its decision was not stored.
    """
    finalists = select_for_retime(done, default)
    if not finalists:
        return
    with session_scope(store) as session:
        decided = repo.task_decision(session, task_id=task.task_id)
    if decided is not None and (
        {KernelConfig.from_dict(r.config) for r in decided.retimes} == set(finalists)
    ):
        return
    rounds = spec.runner.retime_rounds(RETIME_ROUNDS)
    retimes = retime_interleaved(runner.sample_us, finalists, rounds=rounds)
    decision = decide_winner(retimes, default)
    rows = [
        {
            "config": r.config.as_dict(),
            "is_default": r.config == default,
            "rounds": r.rounds,
            "latency_us": r.latency_us,
            "p20_us": r.p20_us,
            "p80_us": r.p80_us,
        }
        for r in retimes
    ]
    kept = {
        "config": decision.config.as_dict(),
        "latency_us": decision.latency_us,
        "default_latency_us": decision.default_latency_us,
        "runner_up": None if decision.runner_up is None else decision.runner_up.as_dict(),
        "spread_us": decision.spread_us,
        "kept": decision.kept,
        "note": decision.note,
    }

    def record() -> bool:
        with session_scope(store) as session:
            return repo.record_decision(
                session,
                task_id=task.task_id,
                worker_id=spec.worker_id,
                environment_id=environment_id,
                retimes=rows,
                decision=kept,
            )

    if not retry_store(record, url=spec.db_url):  # the re-timing is kept through an outage
        raise TaskLost(f"task {task.task_id} was taken from {spec.worker_id}")


def _nkm(task) -> tuple[int, int, int]:
    return task.N, task.K, task.M
