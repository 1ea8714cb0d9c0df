"""What a trial costs a worker: one store transaction in the steady state, the config
in flight kept in memory shared with the supervisor, the lease asked from memory while fresh."""

import multiprocessing as mp
import time
from dataclasses import replace
from types import SimpleNamespace

import pytest
from sqlalchemy import event

from db import repo
from db.connection import session_scope
from tests.tuner.run.test_worker import (  # noqa: F401 - stub_runner: an autouse fixture
    BUDGET,
    StubRunner,
    claim,
    make_store,
    stored,
    stub_runner,
)
from tuner.kernels.dense.space import default_config, vllm_space
from tuner.run.worker import InFlight, Lease, WorkerShared, run_task


@pytest.fixture
def store(tmp_path):
    engine, spec, environment_id = make_store(tmp_path)
    yield engine, spec, environment_id
    engine.dispose()


def commits_of(engine):
    counted = []
    event.listen(engine, "commit", lambda connection: counted.append(1))
    return counted


@pytest.mark.parametrize("budget", [BUDGET, 3 * BUDGET])
def test_one_transaction_per_trial_plus_three_per_task(store, budget):
    engine, spec, environment_id = store
    task = replace(claim(engine, spec), budget=budget)
    commits = commits_of(engine)
    run_task(engine, spec, task, environment_id, vllm_space())
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
        task_id=7, N=256, K=384, M=16, config=default_config().as_dict(), is_default=True,
        since=1234.5,
    )  # fmt: skip
    shared.clear_in_flight()
    assert shared.in_flight() is None
    shared.mark_in_flight(task, default_config(), False)
    shared._flight[0] += 1  # the worker is rewriting it: nothing to read
    assert shared.in_flight() is None


def test_a_fresh_lease_answers_from_memory_and_a_stale_one_asks_the_store(store):
    engine, spec, _ = store
    task = claim(engine, spec)
    lease = Lease(engine, task.task_id, spec.worker_id, lease_s=60)
    commits = commits_of(engine)
    assert lease.holds()  # never renewed: renewed now
    assert len(commits) == 1
    assert all(lease.holds() for _ in range(100))
    assert len(commits) == 1
    with session_scope(engine) as session:  # taken from the worker
        repo.release_tasks(session, worker_id=spec.worker_id)
    assert lease.holds()  # within lease_s / 2 of a renewal: from memory
    lease._renewed_at = time.monotonic() - 31  # the last renewal is older than lease_s / 2
    assert not lease.holds()
    assert not lease.holds() and not lease.renew()  # lost for good, no more store round trips
    assert len(commits) == 3


def test_record_held_trial_writes_only_for_the_holder_and_once(store):
    engine, spec, environment_id = store
    task = claim(engine, spec)
    values = {
        "environment_id": environment_id,
        "config": default_config().as_dict(),
        "is_default": True,
        "status": "ok",
        "latency_us": 10.0,
        "p20_us": 9.5,
        "p80_us": 10.5,
        "measure_s": 0.25,
    }
    with engine.begin() as connection:
        assert not repo.record_trial(connection, task_id=task.task_id, worker_id="w2", **values)
    assert stored(engine, task.task_id) == []
    for _ in range(2):
        with engine.begin() as connection:
            assert repo.record_trial(
                connection, task_id=task.task_id, worker_id=spec.worker_id, **values
            )
    [trial] = stored(engine, task.task_id)
    assert (
        trial.config,
        trial.is_default,
        trial.status,
        trial.latency_us,
        trial.p20_us,
        trial.p80_us,
        trial.measure_s,
    ) == (default_config().as_dict(), True, "ok", 10.0, 9.5, 10.5, 0.25)
    with (
        engine.begin() as connection,
        pytest.raises(ValueError, match="'fine' is not a valid TrialStatus"),
    ):
        repo.record_trial(
            connection,
            task_id=task.task_id,
            worker_id=spec.worker_id,
            **{**values, "status": "fine"},
        )


def test_guided_stores_its_pruned_trials_beyond_the_budget_and_resumes_without_measuring(store):
    engine, spec, environment_id = store
    task = replace(claim(engine, spec), strategy="guided", budget=12)
    run_task(engine, spec, task, environment_id, vllm_space())
    trials = stored(engine, task.task_id)
    statuses = [t.status for t in trials]
    # the stub prunes BLOCK_SIZE_M 256 (out_of_resources): steps and tiles meet some of them
    assert statuses.count("ok") == 12 and statuses.count("out_of_resources") >= 3
    assert len(trials) == len(StubRunner.measured) == 12 + statuses.count("out_of_resources")
    measured = list(StubRunner.measured)
    run_task(engine, spec, task, environment_id, vllm_space())  # resumed: all answered
    assert StubRunner.measured == measured
    assert stored(engine, task.task_id) == trials
