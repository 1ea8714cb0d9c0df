"""The config in flight on a task: marked, read, cleared, fenced to the worker holding the task;
and the unfinished-task count a worker waits on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, select

from db import repo
from db.engine import session_scope
from db.models import Task

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
CONFIG = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1,
          "num_warps": 4, "num_stages": 3}


def _sweep(engine: Engine, device_name: str = "NVIDIA_L20", space: str = "vllm") -> int:
    with session_scope(engine) as session:
        info, _ = repo.create_sweep(
            session, device_name=device_name, model="tiny", tp=1, strategy="grid", budget=4,
            space=space, seed=0, m_values=[1, 16], out_dtype="bfloat16",
            block_shape=(128, 128), shapes=[(256, 384)])
    return info.sweep_id


def _claim(engine: Engine, worker_id: str, now: datetime, **scope) -> repo.TaskInfo | None:
    with session_scope(engine) as session:
        return repo.claim_task(session, sweep_id=scope.pop("sweep_id", None),
                               worker_id=worker_id, lease_s=60, now=now, **scope)


def _in_flight(engine: Engine, *worker_ids: str) -> list[repo.InFlight]:
    with session_scope(engine) as session:
        return repo.in_flight(session, worker_ids=list(worker_ids))


def test_mark_read_clear(engine: Engine) -> None:
    _sweep(engine)
    task = _claim(engine, "w1", T0)
    assert task is not None
    with session_scope(engine) as session:
        assert repo.start_trial(session, task_id=task.task_id, worker_id="w1", config=CONFIG,
                                now=T0 + timedelta(seconds=5))
    [entry] = _in_flight(engine, "w1", "w2")
    assert entry == repo.InFlight(task_id=task.task_id, worker_id="w1", config=CONFIG,
                                  since=T0 + timedelta(seconds=5), N=256, K=384, M=1,
                                  block_shape=(128, 128))
    assert _in_flight(engine, "w2") == [] and _in_flight(engine) == []
    with session_scope(engine) as session:
        assert not repo.start_trial(session, task_id=task.task_id, worker_id="w2",
                                    config=CONFIG)
        assert repo.end_trial(session, task_id=task.task_id, worker_id="w1")
    assert _in_flight(engine, "w1") == []
    with session_scope(engine) as session, pytest.raises(ValueError, match="are not"):
        repo.start_trial(session, task_id=task.task_id, worker_id="w1", config={"x": 1})


def test_a_worker_whose_task_was_taken_cannot_clear_or_mark(engine: Engine) -> None:
    _sweep(engine)
    task = _claim(engine, "w1", T0)
    assert task is not None
    with session_scope(engine) as session:
        assert repo.start_trial(session, task_id=task.task_id, worker_id="w1", config=CONFIG)
    # w1's lease ran out: w2 claims the same task (the earliest), with nothing in flight.
    again = _claim(engine, "w2", T0 + timedelta(seconds=61))
    assert again is not None and again.task_id == task.task_id
    assert _in_flight(engine, "w1", "w2") == []
    with session_scope(engine) as session:
        assert not repo.end_trial(session, task_id=task.task_id, worker_id="w1")
        assert not repo.start_trial(session, task_id=task.task_id, worker_id="w1", config=CONFIG)


@pytest.mark.parametrize("end", ["release", "finish"])
def test_release_and_finish_clear_the_mark(engine: Engine, end: str) -> None:
    _sweep(engine)
    task = _claim(engine, "w1", T0)
    assert task is not None
    with session_scope(engine) as session:
        repo.start_trial(session, task_id=task.task_id, worker_id="w1", config=CONFIG)
        if end == "release":
            assert repo.release_tasks(session, worker_id="w1") == 1
        else:
            assert repo.finish_task(session, task_id=task.task_id, worker_id="w1")
    with session_scope(engine) as session:
        row = session.execute(select(Task.in_flight_config, Task.in_flight_since)
                              .where(Task.task_id == task.task_id)).one()
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
    claimed = [_claim(engine, "w", T0, device_name="NVIDIA_L20", space="custom:abc")
               for _ in range(3)]
    assert [t.sweep_id if t else None for t in claimed] == [custom, custom, None]
    with session_scope(engine) as session:
        # running tasks are still unfinished; finishing one is not
        assert repo.unfinished_tasks(session, sweep_id=custom) == 2
        assert claimed[0] is not None
        repo.finish_task(session, task_id=claimed[0].task_id, worker_id="w")
        assert repo.unfinished_tasks(session, sweep_id=custom) == 1
        assert repo.unfinished_tasks(session, sweep_id=first) == 2
