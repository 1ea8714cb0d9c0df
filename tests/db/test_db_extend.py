"""A sweep asked again with another trial budget: extended (budget and key raised, done tasks
reopened), kept when the stored budget is larger; a worker finishing a task of an extended
sweep hands it back; reopened tasks keep their first finish for the warm starts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, func, select

from db import repo
from db.connection import session_scope
from db.models import Sweep, Task
from tests.storefill import DENSE_SWEEP

T0 = datetime(2020, 1, 1, 12, 0, tzinfo=UTC)  # before the trials' own timestamps
FIELDS: dict[str, Any] = {
    "device_name": "NVIDIA_L20",
    "model": "tiny",
    "tp": 1,
    "strategy": "local",
    "space": "vllm",
    "seed": 0,
    "m_values": [1, 16],
    "out_dtype": "bfloat16",
    "block_shape": (128, 128),
    "shapes": [(256, 384)],
    **DENSE_SWEEP,
}
C1 = {
    "BLOCK_SIZE_M": 16,
    "BLOCK_SIZE_N": 64,
    "BLOCK_SIZE_K": 128,
    "GROUP_SIZE_M": 1,
    "num_warps": 4,
    "num_stages": 2,
}
C2 = {**C1, "BLOCK_SIZE_M": 32}


def _open(engine: Engine, budget: int, **changes: Any) -> repo.OpenedSweep:
    with session_scope(engine) as session:
        return repo.open_sweep(session, **{**FIELDS, **changes, "budget": budget})


def _env(engine: Engine) -> int:
    with session_scope(engine) as session:
        return repo.get_or_create_environment(
            session,
            device_name="NVIDIA_L20",
            gpu_name="NVIDIA L20",
            compute_capability="8.9",
            driver="580",
            cuda="12.9",
            torch="2.11.0",
            triton="3.6.0",
            tuner="0.1.0",
            kernel_hash="k",
        )


def _run_all(
    engine: Engine, worker: str, now: datetime, env: int, configs: list[dict]
) -> list[int]:
    """Claim every claimable task, store `configs` as its trials at `now`, finish it."""
    finished = []
    while True:
        with session_scope(engine) as session:
            task = repo.claim_task(session, sweep_id=None, worker_id=worker, lease_s=60, now=now)
            if task is None:
                return finished
            for config in configs:
                repo.record_trial(
                    session,
                    task_id=task.task_id,
                    environment_id=env,
                    config=config,
                    is_default=False,
                    status="ok",
                    latency_us=10.0 + task.M,
                )
            assert repo.finish_task(
                session, task_id=task.task_id, worker_id=worker, now=now, budget=task.budget
            )
            finished.append(task.task_id)


def _tasks(engine: Engine) -> list[tuple]:
    with session_scope(engine) as session:
        return [
            tuple(row)
            for row in session.execute(
                select(Task.M, Task.state, Task.worker_id, Task.finished_at).order_by(Task.task_id)
            )
        ]


def test_a_larger_budget_extends_the_sweep_and_reopens_its_done_tasks(engine: Engine) -> None:
    first = _open(engine, 3)
    assert (first.outcome, first.info.budget, first.previous_budget) == ("new", 3, 3)
    env = _env(engine)
    assert len(_run_all(engine, "w", T0, env, [C1])) == 2
    extended = _open(engine, 4)
    assert (
        extended.outcome,
        extended.info.sweep_id,
        extended.info.budget,
        extended.previous_budget,
        extended.reopened,
    ) == ("extended", first.info.sweep_id, 4, 3, 2)
    assert extended.info.sweep_key == repo.sweep_key(**FIELDS, budget=4)
    # Pending again, lease dropped, first finish kept; trials kept.
    assert _tasks(engine) == [(1, "pending", None, T0), (16, "pending", None, T0)]
    with session_scope(engine) as session:
        assert session.scalar(select(func.count()).select_from(Sweep)) == 1
        assert repo.sweep_progress(session, sweep_id=first.info.sweep_id).trials_total == 2
    # Searched again to the new budget: their first finish still says when they first ended.
    assert len(_run_all(engine, "w", T0 + timedelta(hours=1), env, [C2])) == 2
    assert _tasks(engine) == [(1, "done", "w", T0), (16, "done", "w", T0)]
    again = _open(engine, 4)
    assert (again.outcome, again.info.sweep_id, again.reopened) == (
        "resumed",
        first.info.sweep_id,
        0,
    )
    smaller = _open(engine, 2)
    assert (smaller.outcome, smaller.info.budget, smaller.previous_budget) == ("kept", 4, 4)
    assert [row[1] for row in _tasks(engine)] == ["done", "done"]
    # Anything else that differs is another sweep.
    other = _open(engine, 4, m_values=[1, 16, 32])
    assert (other.outcome, other.info.sweep_id) == ("new", first.info.sweep_id + 1)


def test_a_task_finished_under_the_old_budget_goes_back_to_the_queue(engine: Engine) -> None:
    sweep_id = _open(engine, 3).info.sweep_id
    with session_scope(engine) as session:
        held = repo.claim_task(session, sweep_id=sweep_id, worker_id="w", lease_s=60, now=T0)
    assert held is not None and held.budget == 3
    extended = _open(engine, 5)  # while "w" searches with budget 3
    assert (extended.outcome, extended.reopened) == ("extended", 0)  # nothing was done yet
    with session_scope(engine) as session:
        assert not repo.finish_task(
            session, task_id=held.task_id, worker_id="w", now=T0, budget=held.budget
        )
    assert _tasks(engine)[0] == (1, "pending", None, None)
    with session_scope(engine) as session:
        again = repo.claim_task(session, sweep_id=sweep_id, worker_id="v", lease_s=60, now=T0)
        assert again is not None and (again.task_id, again.budget) == (held.task_id, 5)
        assert repo.finish_task(
            session, task_id=again.task_id, worker_id="v", now=T0, budget=again.budget
        )
        # Failures are recorded whatever the budget.
        last = repo.claim_task(session, sweep_id=sweep_id, worker_id="v", lease_s=60, now=T0)
        assert last is not None
        assert repo.finish_task(
            session, task_id=last.task_id, worker_id="v", state="failed", error="boom", budget=3
        )
    assert [row[:2] for row in _tasks(engine)] == [(1, "done"), (16, "failed")]
    # Failed tasks stay failed when the budget grows again.
    assert _open(engine, 6).reopened == 1
    assert [row[:2] for row in _tasks(engine)] == [(1, "pending"), (16, "failed")]


def test_warm_starts_of_a_reopened_sweep_are_those_of_its_first_run(engine: Engine) -> None:
    _open(engine, 3)
    env = _env(engine)
    _run_all(engine, "w", T0, env, [C1])
    _open(engine, 4)
    # M=1 is searched again first and finds C2 faster; M=16's warm starts (from before its
    # first trial) still come from M=1 as it stood then: C1, its only trial.
    with session_scope(engine) as session:
        task = repo.claim_task(
            session, sweep_id=None, worker_id="w", lease_s=60, now=T0 + timedelta(hours=1)
        )
        assert task is not None and task.M == 1
        repo.record_trial(
            session,
            task_id=task.task_id,
            environment_id=env,
            config=C2,
            is_default=False,
            status="ok",
            latency_us=1.0,
        )
        assert repo.finish_task(session, task_id=task.task_id, worker_id="w", budget=4)
        fresh = repo.task_winners(
            session,
            device_name="NVIDIA_L20",
            block_shape=(128, 128),
            out_dtype="bfloat16",
            family="dense",
        )
        first_of_m16 = min(
            t.created_at for t in repo.task_trials(session, task_id=task.task_id + 1)
        )
        resumed = repo.task_winners(
            session,
            device_name="NVIDIA_L20",
            block_shape=(128, 128),
            out_dtype="bfloat16",
            finished_before=first_of_m16,
            family="dense",
        )
    assert [(w.M, w.config) for w in fresh] == [(1, C2), (16, C1)]
    assert [(w.M, w.config) for w in resumed] == [(1, C1)]  # not C2, nor M=16 itself
