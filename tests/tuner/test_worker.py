"""A worker's task loop against a real store, with a stub runner: kill mid-task, resume exactly."""

import pytest

from db import repo
from db.engine import open_store, session_scope
from tuner import measure
from tuner.space import default_config, vllm_space
from tuner.trial import TrialResult, TrialStatus
from tuner.worker import WorkerSpec, run_task

BUDGET = 6


class Killed(BaseException):
    """Stands for SIGKILL: nothing after it runs, no handler catches it."""


class StubRunner:
    """Deterministic latencies; raises Killed at the `kill_at`-th measurement."""

    measured: list = []
    kill_at: int | None = None

    def __init__(self, problem, *, backend, seed, interpreter_reps):
        self.problem = problem

    def evaluate(self, config):
        if StubRunner.kill_at is not None and len(StubRunner.measured) == StubRunner.kill_at:
            raise Killed
        StubRunner.measured.append(config)
        latency = 100.0 - config.BLOCK_SIZE_N / 8 + config.num_stages
        if config.BLOCK_SIZE_M == 256:
            return TrialResult(TrialStatus.OUT_OF_RESOURCES, error="shared memory 300 KiB")
        return TrialResult(TrialStatus.OK, latency, latency - 1, latency + 1, 1e-3, None, 0.01)


def make_store(folder):
    url = f"sqlite:///{folder}/tuner.db"
    engine = open_store(url)
    with session_scope(engine) as session:
        sweep, _ = repo.create_sweep(
            session, device_name="TRITON_INTERPRETER", model="tiny", tp=1, strategy="optuna",
            budget=BUDGET, space="vllm", seed=3, m_values=[16], out_dtype="bfloat16",
            block_shape=(128, 128), shapes=[(256, 384)])
        environment_id = repo.get_or_create_environment(
            session, device_name="TRITON_INTERPRETER", gpu_name="TRITON_INTERPRETER",
            compute_capability="", driver="", cuda="", torch="t", triton="t", tuner="t",
            kernel_hash="h")
    spec = WorkerSpec(db_url=url, sweep_id=sweep.sweep_id, worker_id="w1", backend="interpreter")
    return engine, spec, environment_id


@pytest.fixture(autouse=True)
def stub_runner(monkeypatch):
    monkeypatch.setattr(measure, "KernelRunner", StubRunner)
    StubRunner.measured, StubRunner.kill_at = [], None


@pytest.fixture
def store(tmp_path):
    engine, spec, environment_id = make_store(tmp_path)
    yield engine, spec, environment_id
    engine.dispose()


def claim(engine, spec, now=None):
    with session_scope(engine) as session:
        return repo.claim_task(session, sweep_id=spec.sweep_id, worker_id=spec.worker_id,
                               lease_s=60, now=now)


def stored(engine, task_id):
    with session_scope(engine) as session:
        return repo.task_trials(session, task_id=task_id)


def test_default_first_then_budget_distinct_configs(store):
    engine, spec, environment_id = store
    task = claim(engine, spec)
    run_task(engine, spec, task, environment_id, vllm_space())
    trials = stored(engine, task.task_id)
    assert len(trials) == BUDGET == len(StubRunner.measured)
    assert trials[0].config == default_config().as_dict() and trials[0].is_default
    assert sum(t.is_default for t in trials) == 1
    assert [t.config for t in trials] == [c.as_dict() for c in StubRunner.measured]


@pytest.mark.parametrize("kill_at", [0, 1, 3, 5])
def test_killed_task_resumes_without_losing_or_repeating_a_trial(tmp_path, kill_at):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    engine, spec, environment_id = make_store(tmp_path / "a")
    task = claim(engine, spec)
    run_task(engine, spec, task, environment_id, vllm_space())
    uninterrupted = [(t.config, t.status, t.latency_us) for t in stored(engine, task.task_id)]

    engine, spec, environment_id = make_store(tmp_path / "b")
    StubRunner.measured, StubRunner.kill_at = [], kill_at
    task = claim(engine, spec)
    with pytest.raises(Killed):
        run_task(engine, spec, task, environment_id, vllm_space())
    assert len(stored(engine, task.task_id)) == kill_at  # every finished trial is kept

    StubRunner.kill_at = None
    first_run = list(StubRunner.measured)
    run_task(engine, spec, task, environment_id, vllm_space())
    resumed = StubRunner.measured[len(first_run):]
    assert not set(resumed) & set(first_run)  # nothing measured twice
    final = [(t.config, t.status, t.latency_us) for t in stored(engine, task.task_id)]
    assert final == uninterrupted  # same trials, same order, same winner as without the kill
