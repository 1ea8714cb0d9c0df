"""The task queue: claims, leases, heartbeats, finishing, and two processes claiming at once."""

from __future__ import annotations

import multiprocessing
import time
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import Engine, select

from db import repo
from db.connection import connect, open_store, session_scope
from db.models import Task
from tests.storefill import DENSE_SWEEP

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def _sweep(engine: Engine, shapes: list[tuple[int, int]], m_values: list[int]) -> int:
    with session_scope(engine) as session:
        info, _ = repo.create_sweep(
            session,
            device_name="NVIDIA_L20",
            model="tiny",
            tp=1,
            strategy="grid",
            budget=8,
            space="vllm",
            seed=0,
            m_values=m_values,
            out_dtype="bfloat16",
            block_shape=(128, 128),
            shapes=shapes,
            **DENSE_SWEEP,
        )
    return info.sweep_id


def _claim(engine: Engine, worker_id: str, now: datetime, **kwargs: Any) -> repo.TaskInfo | None:
    with session_scope(engine) as session:
        return repo.claim_task(
            session,
            sweep_id=kwargs.pop("sweep_id", None),
            worker_id=worker_id,
            lease_s=60,
            now=now,
            **kwargs,
        )


def test_claims_each_task_once_in_order(engine: Engine) -> None:
    sweep_id = _sweep(engine, [(256, 512)], [1, 16, 32])
    claimed = [_claim(engine, "w1", T0, sweep_id=sweep_id) for _ in range(4)]
    assert claimed[3] is None
    assert [(t.N, t.K, t.M, t.attempts) for t in claimed[:3] if t] == [
        (256, 512, 1, 1),
        (256, 512, 16, 1),
        (256, 512, 32, 1),
    ]
    first = claimed[0]
    assert first is not None
    assert (first.device_name, first.block_shape, first.out_dtype, first.strategy) == (
        "NVIDIA_L20",
        (128, 128),
        "bfloat16",
        "grid",
    )
    assert (first.budget, first.seed, first.space, first.sweep_id) == (8, 0, "vllm", sweep_id)
    with session_scope(engine) as session:
        row = session.get(Task, first.task_id)
        assert row is not None
        assert (row.state, row.worker_id, row.attempts) == ("running", "w1", 1)
        assert row.started_at == T0
        assert row.lease_expires_at == T0 + timedelta(seconds=60)


def test_leases_heartbeat_and_finish(engine: Engine) -> None:
    sweep_id = _sweep(engine, [(256, 512)], [1, 16])
    a = _claim(engine, "w1", T0)
    b = _claim(engine, "w2", T0)
    assert a is not None and b is not None
    assert _claim(engine, "w3", T0 + timedelta(seconds=30)) is None  # both leases live
    with session_scope(engine) as session:
        assert repo.heartbeat(
            session, task_id=a.task_id, worker_id="w1", lease_s=60, now=T0 + timedelta(seconds=30)
        )
    # b's lease ended at T0+60 s; a's was extended to T0+90 s.
    again = _claim(engine, "w3", T0 + timedelta(seconds=70), sweep_id=sweep_id)
    assert again is not None
    assert (again.task_id, again.attempts) == (b.task_id, 2)
    assert _claim(engine, "w4", T0 + timedelta(seconds=70)) is None
    with session_scope(engine) as session:
        assert not repo.heartbeat(session, task_id=b.task_id, worker_id="w2", lease_s=60)
        assert not repo.finish_task(session, task_id=b.task_id, worker_id="w2")
        assert repo.finish_task(session, task_id=b.task_id, worker_id="w3", now=T0)
        assert repo.finish_task(
            session, task_id=a.task_id, worker_id="w1", state="failed", error="boom"
        )
        assert not repo.finish_task(session, task_id=a.task_id, worker_id="w1")
    assert _claim(engine, "w5", T0 + timedelta(days=1)) is None
    with session_scope(engine) as session:
        rows = session.execute(
            select(
                Task.state, Task.worker_id, Task.attempts, Task.error, Task.lease_expires_at
            ).order_by(Task.task_id)
        ).all()
        assert rows == [("failed", "w1", 1, "boom", None), ("done", "w3", 2, None, None)]
        assert session.get(Task, b.task_id).finished_at == T0  # type: ignore[union-attr]
        progress = repo.sweep_progress(session, sweep_id=sweep_id)
    assert (progress.tasks_total, progress.tasks_done, progress.tasks_failed) == (2, 1, 1)


def test_lease_compares_instants_not_wall_clock_text(engine: Engine) -> None:
    _sweep(engine, [(256, 512)], [1])
    assert _claim(engine, "w1", T0) is not None
    plus_two = timezone(timedelta(hours=2))
    # 13:00+02:00 is 11:00 UTC: before the lease ends at 12:01 UTC.
    assert _claim(engine, "w2", datetime(2026, 1, 1, 13, 0, tzinfo=plus_two)) is None
    assert _claim(engine, "w2", datetime(2026, 1, 1, 14, 2, tzinfo=plus_two)) is not None


def test_release_and_filters(engine: Engine) -> None:
    sweep_id = _sweep(engine, [(256, 512)], [1, 16])
    assert _claim(engine, "w1", T0, device_name="NVIDIA_H200") is None
    assert _claim(engine, "w1", T0, sweep_id=sweep_id + 1) is None
    assert _claim(engine, "w1", T0, device_name="NVIDIA_L20") is not None
    assert _claim(engine, "w1", T0, sweep_id=sweep_id) is not None
    with session_scope(engine) as session:
        assert repo.release_tasks(session, worker_id="w1") == 2
        assert repo.release_tasks(session, worker_id="w1") == 0
        rows = session.execute(select(Task.state, Task.worker_id, Task.attempts)).all()
    assert rows == [("pending", None, 1), ("pending", None, 1)]
    again = _claim(engine, "w2", T0)
    assert again is not None and again.attempts == 2


def test_naive_now_is_refused(engine: Engine) -> None:
    with session_scope(engine) as session, pytest.raises(ValueError, match="naive"):
        repo.claim_task(session, sweep_id=None, worker_id="w", lease_s=1, now=datetime(2026, 1, 1))


def _claim_all(url: str, worker_id: str, barrier: Any, out: Any) -> None:
    engine = connect(url)
    barrier.wait()
    claimed = []
    while True:
        with session_scope(engine) as session:
            task = repo.claim_task(session, sweep_id=None, worker_id=worker_id, lease_s=600)
        if task is None:
            break
        claimed.append(task.task_id)
        time.sleep(0.005)  # some work, so that the two workers interleave
        with session_scope(engine) as session:
            repo.finish_task(session, task_id=task.task_id, worker_id=worker_id)
    engine.dispose()
    out.put((worker_id, claimed))


def _open(url: str, barrier: Any, out: Any) -> None:
    barrier.wait()
    try:
        open_store(url).dispose()
        out.put("ok")
    except Exception as exc:  # reported to the parent, which fails the test
        out.put(repr(exc))


def _run_two(target: Any, *args: Any) -> list[Any]:
    context = multiprocessing.get_context("spawn")
    barrier, out = context.Barrier(2), context.Queue()
    processes = [context.Process(target=target, args=(*args[i], barrier, out)) for i in range(2)]
    for process in processes:
        process.start()
    results = [out.get(timeout=60) for _ in processes]
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    return results


def test_two_processes_claim_disjoint_tasks(engine: Engine, store_url: str) -> None:
    _sweep(engine, [(256, 512), (512, 256)], list(range(1, 31)))
    results = dict(_run_two(_claim_all, (store_url, "p1"), (store_url, "p2")))
    first, second = results["p1"], results["p2"]
    assert not set(first) & set(second)
    assert len(first) + len(second) == 60
    assert first and second  # both took part
    with session_scope(engine) as session:
        rows = session.execute(select(Task.state, Task.attempts)).all()
    assert set(rows) == {("done", 1)}
    assert len(rows) == 60


def test_two_processes_create_one_schema(store_url: str) -> None:
    assert _run_two(_open, (store_url,), (store_url,)) == ["ok", "ok"]
