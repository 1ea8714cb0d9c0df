"""A trial's end is fenced to the worker holding the task; release and finish clear the task's
in-flight columns; and the unfinished-task count a worker waits on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, select, update

from db import repo
from db.connection import session_scope
from db.models import Task
from tests.storefill import DENSE_SWEEP

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
CONFIG = {
    "BLOCK_SIZE_M": 16,
    "BLOCK_SIZE_N": 64,
    "BLOCK_SIZE_K": 128,
    "GROUP_SIZE_M": 1,
    "num_warps": 4,
    "num_stages": 3,
}


def _sweep(engine: Engine, device_name: str = "NVIDIA_L20", space: str = "vllm") -> int:
    with session_scope(engine) as session:
        info, _ = repo.create_sweep(
            session,
            device_name=device_name,
            model="tiny",
            tp=1,
            strategy="grid",
            budget=4,
            space=space,
            seed=0,
            m_values=[1, 16],
            out_dtype="bfloat16",
            block_shape=(128, 128),
            shapes=[(256, 384)],
            **DENSE_SWEEP,
        )
    return info.sweep_id


def _claim(engine: Engine, worker_id: str, now: datetime, **scope) -> repo.TaskInfo | None:
    with session_scope(engine) as session:
        return repo.claim_task(
            session,
            sweep_id=scope.pop("sweep_id", None),
            worker_id=worker_id,
            lease_s=60,
            now=now,
            **scope,
        )


def test_end_trial_is_fenced_to_the_worker_holding_the_task(engine: Engine) -> None:
    _sweep(engine)
    task = _claim(engine, "w1", T0)
    assert task is not None
    with session_scope(engine) as session:
        assert not repo.end_trial(session, task_id=task.task_id, worker_id="w2")
        assert repo.end_trial(session, task_id=task.task_id, worker_id="w1")
    # w1's lease ran out: w2 claims the same task (the earliest); w1 can no longer record.
    again = _claim(engine, "w2", T0 + timedelta(seconds=61))
    assert again is not None and again.task_id == task.task_id
    with session_scope(engine) as session:
        assert not repo.end_trial(session, task_id=task.task_id, worker_id="w1")
        assert repo.end_trial(session, task_id=task.task_id, worker_id="w2")


@pytest.mark.parametrize("end", ["release", "finish"])
def test_release_and_finish_clear_the_mark(engine: Engine, end: str) -> None:
    _sweep(engine)
    task = _claim(engine, "w1", T0)
    assert task is not None
    with session_scope(engine) as session:
        session.execute(
            update(Task)
            .where(Task.task_id == task.task_id)
            .values(in_flight_config=CONFIG, in_flight_since=T0)
        )
        if end == "release":
            assert repo.release_tasks(session, worker_id="w1") == 1
        else:
            assert repo.finish_task(session, task_id=task.task_id, worker_id="w1")
    with session_scope(engine) as session:
        row = session.execute(
            select(Task.in_flight_config, Task.in_flight_since).where(Task.task_id == task.task_id)
        ).one()
    assert tuple(row) == (None, None)


def test_unfinished_tasks_and_claims_by_scope(engine: Engine) -> None:
    first = _sweep(engine)
    other = _sweep(engine, device_name="NVIDIA_H200")
    custom = _sweep(engine, space="custom:abc")
    with session_scope(engine) as session:
        assert repo.unfinished_tasks(session) == 6
        assert repo.unfinished_tasks(session, device_name="NVIDIA_L20") == 4
        assert repo.unfinished_tasks(session, device_name="NVIDIA_L20", space="vllm") == 2
        assert repo.unfinished_tasks(session, sweep_id=other) == 2
        assert repo.unfinished_tasks(session, sweep_id=other, device_name="NVIDIA_L20") == 0
    claimed = [
        _claim(engine, "w", T0, device_name="NVIDIA_L20", space="custom:abc") for _ in range(3)
    ]
    assert [t.sweep_id if t else None for t in claimed] == [custom, custom, None]
    with session_scope(engine) as session:
        # running tasks are still unfinished; finishing one is not
        assert repo.unfinished_tasks(session, sweep_id=custom) == 2
        assert claimed[0] is not None
        repo.finish_task(session, task_id=claimed[0].task_id, worker_id="w")
        assert repo.unfinished_tasks(session, sweep_id=custom) == 1
        assert repo.unfinished_tasks(session, sweep_id=first) == 2
