"""A worker's task loop against a real store, with a stub runner: kill mid-task, resume exactly;
what a trial costs (one store transaction, the lease asked from memory while fresh); a crashed
trial on CUDA ends the process after recording it; a task taken from the worker records nothing."""

import multiprocessing as mp
import time
from dataclasses import replace
from types import SimpleNamespace

import pytest
from sqlalchemy import event

from db import repo
from db.connection import open_store, session_scope
from db.models import Task
from tests import storefill
from tuner.core import TrialStatus
from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.space import default_config, vllm_space
from tuner.measure import runner as runners
from tuner.measure.runner import make_runner
from tuner.measure.trial import TrialResult
from tuner.run.plan import trial_cap
from tuner.run.worker import (
    ContextLost,
    InFlight,
    Lease,
    TaskLost,
    TaskRun,
    WorkerShared,
    WorkerSpec,
)

BUDGET = 6
# One sweep of tiny's (256, 384) at M=16 on the interpreter; tests replace its strategy or M.
SPEC = replace(
    storefill.SPEC,
    device_name="TRITON_INTERPRETER",
    model="tiny",
    tp=1,
    space="vllm",
    seed=3,
    budget=BUDGET,
    m_values=[16],
    shapes=[(256, 384)],
)


class Killed(BaseException):
    """Stands for SIGKILL: nothing after it runs, no handler catches it."""


class StubRunner:
    """Deterministic latencies; raises Killed at the `kill_at`-th measurement; configs with
    BLOCK_SIZE_N `crashing_n` crash like a broken kernel."""

    measured: list = []
    sampled: list = []
    kill_at: int | None = None
    crashing_n: int | None = None

    def __init__(self, problem, *, device, seed, interpreter_reps=3, warmup_s, rep_s):
        self.problem = problem
        StubRunner.budgets = (warmup_s, rep_s)

    def evaluate(self, config):
        if StubRunner.kill_at is not None and len(StubRunner.measured) == StubRunner.kill_at:
            raise Killed
        StubRunner.measured.append(config)
        if config.BLOCK_SIZE_N == StubRunner.crashing_n:
            return TrialResult(TrialStatus.CRASHED, error="RuntimeError: illegal memory access")
        if config.BLOCK_SIZE_M == 256:
            return TrialResult(TrialStatus.OUT_OF_RESOURCES, error="shared memory 300 KiB")
        latency = stub_latency_us(config)
        return TrialResult(TrialStatus.OK, latency, latency - 1, latency + 1, 1e-3, None, 0.01)

    def sample_us(self, config):
        """Re-timing: the trial's latency, the same in every round (spread 0)."""
        StubRunner.sampled.append(config)
        return stub_latency_us(config)


def stub_latency_us(config) -> float:
    return 100.0 - config.BLOCK_SIZE_N / 8 + config.num_stages


ENV = dict.fromkeys(("compute_capability", "driver", "cuda"), "") | {"kernel_hash": "h"}
ENV |= dict.fromkeys(("torch", "triton", "tuner"), "t") | {"device_name": "TRITON_INTERPRETER"}
ENV |= {"gpu_name": "TRITON_INTERPRETER"}


L20 = {"device_name": "NVIDIA_L20", "gpu_name": "NVIDIA L20", "compute_capability": "8.9"}


def make_store(folder, strategy="optuna", backend=None):
    """SPEC's sweep by `strategy` on the interpreter in a new store in `folder`; with `backend`
    (cuda or interpreter) a grid sweep on an L20 over a custom space, measured by it."""
    url = f"sqlite:///{folder}/tuner.db"
    engine = open_store(url)
    spec, env = replace(SPEC, strategy=strategy), ENV
    if backend is not None:
        gpu = replace(SPEC, device_name="NVIDIA_L20", strategy="grid", space="custom")
        spec, env = gpu, ENV | L20
    with session_scope(engine) as session:
        sweep, _ = repo.create_sweep(session, spec)
        environment_id = repo.get_or_create_environment(session, **env)
    runner = make_runner(backend or "interpreter", device_name=spec.device_name)
    return engine, WorkerSpec(url, sweep.sweep_id, "w1", runner), environment_id


@pytest.fixture(autouse=True)
def stub_runner(monkeypatch):
    monkeypatch.setattr(runners, "KernelRunner", StubRunner)
    StubRunner.measured, StubRunner.sampled, StubRunner.kill_at = [], [], None
    StubRunner.crashing_n = None


@pytest.fixture
def store(tmp_path):
    engine, spec, environment_id = make_store(tmp_path)
    yield engine, spec, environment_id
    engine.dispose()


def claim(engine, spec, now=None):
    with session_scope(engine) as session:
        return repo.claim_task(
            session, sweep_id=spec.sweep_id, worker_id=spec.worker_id, lease_s=60, now=now
        )


def stored(engine, task_id):
    with session_scope(engine) as session:
        return repo.task_trials(session, task_id=task_id)


@pytest.mark.parametrize("kill_at", [0, 1, 3, 5])
def test_killed_task_resumes_without_losing_or_repeating_a_trial(tmp_path, kill_at):
    engine, spec, environment_id = make_store(tmp_path / "a")
    task = claim(engine, spec)
    TaskRun(engine, spec, task, environment_id, vllm_space()).run()
    uninterrupted = [(t.config, t.status, t.latency_us) for t in stored(engine, task.task_id)]

    engine, spec, environment_id = make_store(tmp_path / "b")
    StubRunner.measured, StubRunner.kill_at = [], kill_at
    task = claim(engine, spec)
    with pytest.raises(Killed):
        TaskRun(engine, spec, task, environment_id, vllm_space()).run()
    assert len(stored(engine, task.task_id)) == kill_at  # every finished trial is kept

    StubRunner.kill_at = None
    first_run = list(StubRunner.measured)
    TaskRun(engine, spec, task, environment_id, vllm_space()).run()
    resumed = StubRunner.measured[len(first_run) :]
    assert not set(resumed) & set(first_run)  # nothing measured twice
    final = [(t.config, t.status, t.latency_us) for t in stored(engine, task.task_id)]
    assert final == uninterrupted  # same trials, same order, same winner as without the kill


def test_default_first_then_budget_configs_and_the_finalists_retimed_once(store):
    engine, spec, environment_id = store
    task = claim(engine, spec)
    TaskRun(engine, spec, task, environment_id, vllm_space()).run()
    trials = stored(engine, task.task_id)
    assert len(trials) == BUDGET == len(StubRunner.measured)
    assert trials[0].config == default_config().as_dict() and trials[0].is_default
    assert sum(t.is_default for t in trials) == 1
    assert [t.config for t in trials] == [c.as_dict() for c in StubRunner.measured]
    # The search's short timing (the first rung of successive halving): 5 ms warmup, 20 ms.
    assert StubRunner.budgets == (0.005, 0.020)
    # The stub's 6 trials: default 86 us, 32x256x128 g64 w8 s2 70 us, 128x256x64 g16 w8 s4
    # 72 us, two slower ones and one out of resources. Finalists: the default, then the 3
    # fastest, the default being one of them.
    default = default_config()
    fast, second = KernelConfig(32, 256, 128, 64, 8, 2), KernelConfig(128, 256, 64, 16, 8, 4)
    # Three rounds (the interpreter's timed calls per trial), the start moving by one each round.
    rounds = [(default, fast, second), (fast, second, default), (second, default, fast)]
    assert StubRunner.sampled == [config for round_ in rounds for config in round_]
    with session_scope(engine) as session:
        decision = repo.task_decision(session, task_id=task.task_id)
    retimes = sorted((r.latency_us, r.is_default, r.rounds) for r in decision.retimes)
    assert retimes == [(70.0, False, 3), (72.0, False, 3), (86.0, True, 3)]
    assert KernelConfig.from_dict(decision.config) == fast and decision.kept == "fastest"
    assert KernelConfig.from_dict(decision.runner_up) == second
    times = (decision.latency_us, decision.default_latency_us, decision.spread_us)
    assert times == (70.0, 86.0, 0.0)

    StubRunner.measured, StubRunner.sampled = [], []
    TaskRun(engine, spec, task, environment_id, vllm_space()).run()  # resumed after its decision
    assert StubRunner.measured == [] and StubRunner.sampled == []


class FakeCompiler:
    """Stands for CompileAhead: configs with 8 warps 'need' more shared memory than the GPU has."""

    def __init__(self):
        self.started, self.checked, self.ended = [], [], 0

    def start(self, problem, configs):
        self.started.append((problem.M, tuple(configs)))

    def check(self, config):
        self.checked.append(config)
        if config.num_warps == 8:
            return TrialResult(
                TrialStatus.OUT_OF_RESOURCES,
                error="shared memory 300000 B > 232448 B (compiled for sm90)",
                measure_s=0.0,
            )
        return None

    def end(self):
        self.ended += 1


def test_the_gate_compiles_grids_planned_start_and_prunes_without_a_launch(tmp_path):
    engine, spec, environment_id = make_store(tmp_path, strategy="grid")
    compiler = FakeCompiler()
    task = claim(engine, spec)
    TaskRun(engine, spec, task, environment_id, vllm_space(), compiler=compiler).run()
    [(m, first)] = compiler.started
    trials = stored(engine, task.task_id)
    # The default, then the space in order: what the search measured first, in order.
    assert m == 16 and len(first) == BUDGET and first[0] == default_config()
    assert [KernelConfig.from_dict(t.config) for t in trials] == list(first)
    assert list(first[1:]) == [c for c in vllm_space() if c != default_config()][: BUDGET - 1]
    pruned = [t for t in trials if t.config["num_warps"] == 8]
    assert pruned and all(t.status == "out_of_resources" and t.measure_s == 0.0 for t in pruned)
    assert all(config.num_warps == 4 for config in StubRunner.measured)  # never launched
    assert compiler.checked == list(first) and compiler.ended == 1
    engine.dispose()


def test_a_guided_task_starts_from_the_winner_and_learns_from_the_trials_of_a_neighbouring_m(
    tmp_path, monkeypatch
):
    from tuner.search.guided import GuidedStrategy

    given = []
    search = GuidedStrategy.search

    def spy(self, evaluate, **kwargs):
        given.append(kwargs["related"])
        return search(self, evaluate, **kwargs)

    monkeypatch.setattr(GuidedStrategy, "search", spy)
    engine, spec, environment_id = make_store(tmp_path)  # M=16 by optuna, M=32 guided
    first = claim(engine, spec)
    TaskRun(engine, spec, first, environment_id, vllm_space()).run()
    with session_scope(engine) as session:
        repo.finish_task(session, task_id=first.task_id, worker_id=spec.worker_id, state="done")
        sweep, _ = repo.create_sweep(session, replace(SPEC, strategy="guided", m_values=[32]))
    later = replace(spec, sweep_id=sweep.sweep_id)
    compiler = FakeCompiler()
    TaskRun(
        engine, later, claim(engine, later), environment_id, vllm_space(), compiler=compiler
    ).run()
    # M=16's fastest trial (70 us) is the neighbour M=32 starts from, after the default.
    assert compiler.started == [(32, (default_config(), KernelConfig(32, 256, 128, 64, 8, 2)))]
    # M=16's ok trials, in the order they were stored (its 256-row tiles ran out of resources).
    ok = [
        (KernelConfig.from_dict(t.config), t.latency_us)
        for t in stored(engine, first.task_id)
        if t.status == "ok"
    ]
    assert len(ok) >= BUDGET - 1 and given == [[ok]]
    engine.dispose()


def test_a_larger_budget_resumes_the_search_and_measures_only_new_trials(tmp_path):
    engine, spec, environment_id = make_store(tmp_path / "a")
    task = claim(engine, spec)
    TaskRun(engine, spec, replace(task, budget=BUDGET + 4), environment_id, vllm_space()).run()
    uninterrupted = [(t.config, t.latency_us) for t in stored(engine, task.task_id)]

    engine, spec, environment_id = make_store(tmp_path / "b")
    StubRunner.measured, StubRunner.sampled = [], []
    task = claim(engine, spec)
    TaskRun(engine, spec, task, environment_id, vllm_space()).run()
    first_run, first_retimed = list(StubRunner.measured), list(StubRunner.sampled)
    StubRunner.measured, StubRunner.sampled = [], []
    TaskRun(engine, spec, replace(task, budget=BUDGET + 4), environment_id, vllm_space()).run()
    assert len(StubRunner.measured) == 4 and not set(StubRunner.measured) & set(first_run)
    assert [(t.config, t.latency_us) for t in stored(engine, task.task_id)] == uninterrupted
    # The new trials change the finalists, so the decision is re-timed and replaced.
    with session_scope(engine) as session:
        decision = repo.task_decision(session, task_id=task.task_id)
    tie = KernelConfig(64, 256, 64, 64, 4, 2)  # a new 70 us config, as fast as the best
    assert tie in StubRunner.measured and tie not in first_retimed
    assert set(StubRunner.sampled) == set(first_retimed) | {tie}
    assert [(KernelConfig.from_dict(r.config), r.latency_us) for r in decision.retimes] == [
        (KernelConfig(32, 256, 128, 64, 8, 2), 70.0),
        (tie, 70.0),
        (KernelConfig(128, 256, 64, 16, 8, 4), 72.0),
        (default_config(), 86.0),
    ]
    assert (KernelConfig.from_dict(decision.config), decision.kept) == (tie, "simpler")


def test_a_resumed_search_stops_at_the_budget_whatever_it_asks(store):
    engine, spec, environment_id = store
    task = claim(engine, spec)
    TaskRun(engine, spec, task, environment_id, vllm_space()).run()  # optuna: 6 trials
    assert trial_cap(BUDGET, vllm_space(), default_config()) == BUDGET
    assert trial_cap(BUDGET, [KernelConfig(16, 64, 128, 1, 4, 2)], default_config()) == 2
    # grid would ask for other configs than optuna did: at the same budget none is measured,
    # at two more exactly two.
    StubRunner.measured = []
    TaskRun(engine, spec, replace(task, strategy="grid"), environment_id, vllm_space()).run()
    assert StubRunner.measured == []
    TaskRun(
        engine,
        spec,
        replace(task, strategy="grid", budget=BUDGET + 2),
        environment_id,
        vllm_space(),
    ).run()
    assert len(StubRunner.measured) == 2
    assert len(stored(engine, task.task_id)) == BUDGET + 2


# What a trial costs a worker: one store transaction in the steady state, the config in flight
# kept in memory shared with the supervisor, the lease asked from memory while fresh.
def commits_of(engine):
    counted = []
    event.listen(engine, "commit", lambda connection: counted.append(1))
    return counted


@pytest.mark.parametrize("budget", [BUDGET, 3 * BUDGET])
def test_one_transaction_per_trial_plus_three_per_task(store, budget):
    engine, spec, environment_id = store
    task = replace(claim(engine, spec), budget=budget)
    commits = commits_of(engine)
    TaskRun(engine, spec, task, environment_id, vllm_space()).run()
    # one to read the task's trials and warm starts (renewing its lease), one per trial,
    # one to read the task's decision and one to record the re-timing's
    assert len(commits) == budget + 3
    assert len(stored(engine, task.task_id)) == len(StubRunner.measured) == budget


def test_the_mark_in_flight_round_trips_and_clears(monkeypatch):
    shared = WorkerShared(mp.get_context("spawn"))
    assert shared.in_flight() is None
    monkeypatch.setattr(time, "time", lambda: 1234.5)
    task = SimpleNamespace(task_id=7, N=256, K=384, M=16)
    shared.mark_in_flight(task, default_config(), True)
    assert shared.in_flight() == InFlight(
        task_id=7,
        N=256,
        K=384,
        M=16,
        config=default_config().as_dict(),
        is_default=True,
        since=1234.5,
    )
    shared.mark_in_flight(task, None)
    assert shared.in_flight() is None
    shared.mark_in_flight(task, default_config(), False)
    shared._flight[0] += 1  # the worker is rewriting it: nothing to read
    assert shared.in_flight() is None


def test_a_lease_is_renewed_by_its_heartbeat_and_lost_for_good_once_the_task_is_taken(store):
    engine, spec, _ = store
    task = claim(engine, spec)
    lease = Lease(engine, task.task_id, spec.worker_id, lease_s=0.2)

    def expires():
        with session_scope(engine) as session:
            return session.get(Task, task.task_id).lease_expires_at

    claimed = expires()
    stopped = lease.heartbeat()
    try:
        wait_until(lambda: expires() != claimed)  # renewed by the heartbeat
        assert not lease.lost.is_set()
        with session_scope(engine) as session:  # taken from the worker
            repo.release_tasks(session, worker_id=spec.worker_id)
        wait_until(lease.lost.is_set)
        commits = commits_of(engine)
        assert not lease.renew() and not commits  # lost for good, no more store round trips
    finally:
        stopped.set()


def wait_until(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_guided_stores_its_pruned_trials_beyond_the_budget_and_resumes_without_measuring(store):
    engine, spec, environment_id = store
    task = replace(claim(engine, spec), strategy="guided", budget=12)
    TaskRun(engine, spec, task, environment_id, vllm_space()).run()
    trials = stored(engine, task.task_id)
    statuses = [t.status for t in trials]
    # the stub prunes BLOCK_SIZE_M 256 (out_of_resources): steps and tiles meet some of them
    assert statuses.count("ok") == 12 and statuses.count("out_of_resources") >= 3
    assert len(trials) == len(StubRunner.measured) == 12 + statuses.count("out_of_resources")
    measured = list(StubRunner.measured)
    TaskRun(engine, spec, task, environment_id, vllm_space()).run()  # resumed: all answered
    assert StubRunner.measured == measured
    columns = ("trial_id", "config", "status", "latency_us", "created_at")
    assert [[getattr(t, c) for c in columns] for t in stored(engine, task.task_id)] == [
        [getattr(t, c) for c in columns] for t in trials
    ]


def stored_n(engine, task_id):
    return [(t.config["BLOCK_SIZE_N"], t.status) for t in stored(engine, task_id)]


# vLLM's default first (BLOCK_SIZE_N 128), then the grid in order: its 4th config crashes.
SPACE = [
    c
    for c in vllm_space()
    if c.BLOCK_SIZE_K == 128
    and c.GROUP_SIZE_M == 1
    and c.num_warps == 4
    and c.num_stages == 2
    and c.BLOCK_SIZE_M in (16, 32)
][:6]


def test_a_crash_on_cuda_restarts_the_process_and_the_task_goes_on(tmp_path):
    StubRunner.crashing_n = 256
    assert [c.BLOCK_SIZE_N for c in SPACE] == [32, 64, 128, 256, 32, 64]
    engine, spec, environment_id = make_store(tmp_path / "interpreter", backend="interpreter")
    task = claim(engine, spec)
    TaskRun(engine, spec, task, environment_id, SPACE).run()  # records the crash and goes on
    uninterrupted = stored_n(engine, task.task_id)
    assert uninterrupted[:5] == [(128, "ok"), (32, "ok"), (64, "ok"), (128, "ok"), (256, "crashed")]
    assert len(uninterrupted) > 5

    engine, spec, environment_id = make_store(tmp_path, backend="cuda")
    task = claim(engine, spec)
    StubRunner.measured = []
    with pytest.raises(ContextLost, match="illegal memory access"):
        TaskRun(engine, spec, task, environment_id, SPACE).run()
    assert stored_n(engine, task.task_id) == uninterrupted[:5]  # the crash is recorded first
    # the next process: the crash is answered from the store, not measured again
    with session_scope(engine) as session:
        repo.release_tasks(session, worker_id="w1")
    spec = replace(spec, worker_id="w2")
    task = claim(engine, spec)
    StubRunner.measured = []
    TaskRun(engine, spec, task, environment_id, SPACE).run()
    assert [c.BLOCK_SIZE_N for c in StubRunner.measured] == [n for n, _ in uninterrupted[5:]]
    assert stored_n(engine, task.task_id) == uninterrupted


def test_a_task_taken_from_the_worker_records_nothing(tmp_path):
    engine, spec, environment_id = make_store(tmp_path, backend="cuda")
    task = claim(engine, spec)
    with session_scope(engine) as session:
        repo.release_tasks(session, worker_id=spec.worker_id)
    with pytest.raises(TaskLost, match=f"task {task.task_id} is no longer held by w1"):
        TaskRun(engine, spec, task, environment_id, SPACE).run()
    assert stored_n(engine, task.task_id) == []
    assert StubRunner.measured == []  # not even the default config was measured


def test_a_task_that_fails_on_a_gpu_restarts_the_process(tmp_path, monkeypatch):
    """An error outside a trial (here: in re-timing) fails its task; on a GPU the process then
    exits for a fresh one, as a sticky CUDA error would fail every later task at once."""
    from sqlalchemy import select

    from db.models import Task
    from tuner.run import worker

    engine, spec, _ = make_store(tmp_path, backend="cuda")
    calls = []

    def failing_run(self):
        calls.append(self.task.task_id)
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(runners.GpuRunner, "environment", lambda self, kernel, family: ENV | L20)
    monkeypatch.setattr(worker.TaskRun, "run", failing_run)
    with pytest.raises(SystemExit) as exit_:
        worker.worker_main(spec)
    assert exit_.value.code == worker.EXIT_RESTART
    with session_scope(engine) as session:
        assert session.scalars(select(Task.state)).all() == ["failed"]
    assert len(calls) == 1
