"""The write side of a sweep: devices and environments, sweeps (their keys, extension by a
larger budget), the task queue (claims, leases, heartbeats, finishing, two processes at once),
trials recorded once, and re-timings with their decision."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import Engine, delete, func, select, update

from db import repo
from db.connection import connect, session_scope
from db.models import Decision, Device, Environment, Retime, Sweep, Task, Trial
from tests.db.conftest import (
    C0,
    C1,
    C2,
    C3,
    SPEC,
    claim_all,
    decide,
    decision,
    environment,
    retime,
    sweep,
)
from tests.db.test_store import run_two
from tuner.core import CONFIG_KEYS

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
BIG = replace(
    SPEC, model="Qwen3.8-27B-FP8", tp=2, strategy="optuna", budget=40, m_values=(16, 1, 4096)
)
BIG = replace(BIG, shapes=((5120, 3072), (17408, 5120)))
FLYING = {"in_flight_config": C1, "in_flight_since": T0}
FLIGHT = select(Task.in_flight_config, Task.in_flight_since)


def test_devices_and_environments_are_found_or_added_once(engine: Engine) -> None:
    with session_scope(engine) as session:
        device_id = repo.get_or_create_device(session, device_name="NVIDIA_L20")
        assert repo.get_or_create_device(session, device_name="NVIDIA_L20") == device_id
        first = environment(session)
    with session_scope(engine) as session:
        assert environment(session) == first
        other = environment(session, triton="3.7.0")
        cpu = environment(session, device_name="TRITON_INTERPRETER", compute_capability="")
        names = session.scalars(select(Device.device_name).order_by(Device.device_id)).all()
        rows = session.execute(select(Environment.environment_id, Environment.device_id))
        assert names == ["NVIDIA_L20", "TRITON_INTERPRETER"]
        assert sorted(rows) == [(first, device_id), (other, device_id), (cpu, device_id + 1)]


def test_a_sweep_is_created_once_with_its_tasks(engine: Engine) -> None:
    with session_scope(engine) as session:
        info, created = repo.create_sweep(session, BIG)
    got = (info.m_values, info.block_shape, info.device_name)
    assert created and got == ((1, 16, 4096), (128, 128), "NVIDIA_L20")
    assert info.created_at.utcoffset() is not None and len(info.sweep_key) == 64
    reordered = replace(BIG, m_values=(4096, 16, 1, 16), shapes=BIG.shapes[::-1])
    with session_scope(engine) as session:
        assert repo.create_sweep(session, reordered) == (info, False)
        other, created_other = repo.create_sweep(session, replace(BIG, seed=1))
        assert created_other and other.sweep_id != info.sweep_id
        columns = (Task.N, Task.K, Task.M, Task.state, Task.attempts, Task.family)
        tasks = session.execute(
            select(*columns).where(Task.sweep_id == info.sweep_id).order_by(Task.task_id)
        ).all()
    shapes = [(5120, 3072), (17408, 5120)]
    assert tasks == [(n, k, m, "pending", 0, "dense") for n, k in shapes for m in (1, 16, 4096)]


TOY = {"family": "toy", "shape_params": "", "family_in_key": True}
MOE = {"family": "moe", "shape_params": "E=8,top_k=2", "family_in_key": True}


@pytest.mark.parametrize(
    ("block_shape", "key"),
    [  # the keys of stored sweeps: each must still find its sweep
        ((128, 128), "00b38e142113660ac063704f3719224d363c1f32e63ebdf49d83b9f30cefdffd"),
        ((64, 128), "69f3156cbc1fb971112de8679035a51a5749f0869907591642a3a5aa6571490c"),
        ([1, 1], "46d14567ecbc7dd758fcdce82102b7029a93371fbe37427a5f6c322aba23523a"),
        (None, "90a38e89467bf715fb3b5a84ae094fa02f34b6664bda02c37562bb454d0731f9"),
    ],
)
def test_a_sweep_keeps_its_key(block_shape: Any, key: str) -> None:
    keyed = replace(BIG, block_shape=block_shape)
    assert repo.sweep_key(keyed) == key


def test_another_family_or_none_block_shape_is_a_sweep_of_its_own(engine: Engine) -> None:
    with session_scope(engine) as session:
        per_tensor, created = repo.create_sweep(session, replace(BIG, **TOY, block_shape=None))
        blocked, _ = repo.create_sweep(session, replace(BIG, **TOY))
        moe, _ = repo.create_sweep(session, replace(BIG, **MOE))
        rows = session.execute(select(Sweep.block_n, Sweep.block_k).order_by(Sweep.sweep_id))
        assert [tuple(row) for row in rows] == [(0, 0), (128, 128), (128, 128)]
        task = repo.claim_task(session, sweep_id=per_tensor.sweep_id, worker_id="w", lease_s=60)
        moe_task = repo.claim_task(session, sweep_id=moe.sweep_id, worker_id="w", lease_s=60)
    assert created and per_tensor.block_shape is None and blocked.block_shape == (128, 128)
    assert task is not None and (task.block_shape, task.family) == (None, "toy")
    assert moe_task is not None and moe_task.shape_params == "E=8,top_k=2"


def _claim(engine: Engine, worker_id: str, now: datetime, **scope: Any) -> repo.TaskInfo | None:
    with session_scope(engine) as session:
        sweep_id = scope.pop("sweep_id", None)
        return repo.claim_task(
            session, sweep_id=sweep_id, worker_id=worker_id, lease_s=60, now=now, **scope
        )


def test_claims_each_task_once_in_order(engine: Engine) -> None:
    with session_scope(engine) as session:
        sweep_id = sweep(session, budget=8, m_values=[1, 16, 32])
    claimed = [_claim(engine, "w1", T0, sweep_id=sweep_id) for _ in range(4)]
    assert claimed[3] is None
    assert [(t.N, t.K, t.M, t.attempts) for t in claimed[:3] if t] == [
        (256, 512, m, 1) for m in (1, 16, 32)
    ]
    first = claimed[0]
    assert first is not None
    got = (first.device_name, first.block_shape, first.out_dtype, first.strategy, first.budget)
    assert got == ("NVIDIA_L20", (128, 128), "bfloat16", "grid", 8)
    assert (first.seed, first.space, first.sweep_id) == (0, "vllm", sweep_id)
    with session_scope(engine) as session:
        row = session.get_one(Task, first.task_id)
        assert (row.state, row.worker_id, row.attempts, row.started_at) == ("running", "w1", 1, T0)
        assert row.lease_expires_at == T0 + timedelta(seconds=60)


def test_leases_heartbeat_and_finish(engine: Engine) -> None:
    with session_scope(engine) as session:
        sweep_id = sweep(session)
    a, b = _claim(engine, "w1", T0), _claim(engine, "w2", T0)
    assert a is not None and b is not None
    assert _claim(engine, "w3", T0 + timedelta(seconds=30)) is None  # both leases live
    with session_scope(engine) as session:
        at = T0 + timedelta(seconds=30)
        assert repo.heartbeat(session, task_id=a.task_id, worker_id="w1", lease_s=60, now=at)
    # b's lease ended at T0+60 s; a's was extended to T0+90 s.
    again = _claim(engine, "w3", T0 + timedelta(seconds=70), sweep_id=sweep_id)
    assert again is not None and (again.task_id, again.attempts) == (b.task_id, 2)
    assert _claim(engine, "w4", T0 + timedelta(seconds=70)) is None
    with session_scope(engine) as session:
        assert not repo.heartbeat(session, task_id=b.task_id, worker_id="w2", lease_s=60)
        assert not repo.finish_task(session, task_id=b.task_id, worker_id="w2")
        assert repo.finish_task(session, task_id=b.task_id, worker_id="w3", now=T0)
        failed = {"state": "failed", "error": "boom"}
        assert repo.finish_task(session, task_id=a.task_id, worker_id="w1", **failed)
        assert not repo.finish_task(session, task_id=a.task_id, worker_id="w1")
    assert _claim(engine, "w5", T0 + timedelta(days=1)) is None
    with session_scope(engine) as session:
        columns = (Task.state, Task.worker_id, Task.attempts, Task.error, Task.lease_expires_at)
        rows = session.execute(select(*columns).order_by(Task.task_id)).all()
        assert rows == [("failed", "w1", 1, "boom", None), ("done", "w3", 2, None, None)]
        assert session.get_one(Task, b.task_id).finished_at == T0


def test_a_lease_compares_instants_not_wall_clock_text(engine: Engine) -> None:
    with session_scope(engine) as session:
        sweep(session, m_values=[1])
    assert _claim(engine, "w1", T0) is not None
    plus_two = timezone(timedelta(hours=2))
    # 13:00+02:00 is 11:00 UTC: before the lease ends at 12:01 UTC.
    assert _claim(engine, "w2", datetime(2026, 1, 1, 13, 0, tzinfo=plus_two)) is None
    assert _claim(engine, "w2", datetime(2026, 1, 1, 14, 2, tzinfo=plus_two)) is not None
    with pytest.raises(ValueError, match="naive"):
        _claim(engine, "w3", datetime(2026, 1, 1))


def test_release_scopes_and_unfinished_tasks(engine: Engine) -> None:
    with session_scope(engine) as session:
        first = sweep(session)
        other = sweep(session, device_name="NVIDIA_H200")
        custom = sweep(session, space="custom:abc")
        assert repo.unfinished_tasks(session) == 6
        assert repo.unfinished_tasks(session, device_name="NVIDIA_L20") == 4
        assert repo.unfinished_tasks(session, device_name="NVIDIA_L20", space="vllm") == 2
        assert repo.unfinished_tasks(session, sweep_id=other) == 2
        assert repo.unfinished_tasks(session, sweep_id=other, device_name="NVIDIA_L20") == 0
    assert _claim(engine, "w1", T0, sweep_id=custom + 1) is None
    assert _claim(engine, "w1", T0, device_name="NVIDIA_B200") is None
    scope = {"device_name": "NVIDIA_L20", "space": "custom:abc"}
    claimed = [_claim(engine, "w", T0, **scope) for _ in range(3)]
    assert [t.sweep_id if t else None for t in claimed] == [custom, custom, None]
    assert claimed[0] is not None and _claim(engine, "w", T0, sweep_id=first) is not None
    with session_scope(engine) as session:
        assert repo.unfinished_tasks(session, sweep_id=custom) == 2  # running is unfinished
        repo.finish_task(session, task_id=claimed[0].task_id, worker_id="w")
        assert repo.unfinished_tasks(session, sweep_id=custom) == 1
        assert repo.release_tasks(session, worker_id="w") == 2
        assert repo.release_tasks(session, worker_id="w") == 0
        rows = session.execute(
            select(Task.state, Task.worker_id, Task.attempts).where(Task.attempts > 0)
        )
        assert sorted(rows) == [("done", "w", 1), ("pending", None, 1), ("pending", None, 1)]
    again = _claim(engine, "w2", T0, sweep_id=first)
    assert again is not None and again.attempts == 2


def test_a_trial_is_recorded_only_by_the_worker_holding_its_task(engine: Engine) -> None:
    """A worker whose lease ran out (another took the task) can neither end a trial, nor record
    one, nor decide; release and finish clear the config in flight."""
    with session_scope(engine) as session:
        sweep(session)
        env = environment(session)
    task = _claim(engine, "w1", T0)
    assert task is not None
    held = {"task_id": task.task_id, "environment_id": env, "config": C1, "is_default": False}
    with session_scope(engine) as session:
        assert not repo.end_trial(session, task_id=task.task_id, worker_id="w2")
        assert repo.end_trial(session, task_id=task.task_id, worker_id="w1")
    again = _claim(engine, "w2", T0 + timedelta(seconds=61))  # w1's lease ran out
    assert again is not None and again.task_id == task.task_id
    with session_scope(engine) as session:
        assert not repo.record_trial(session, worker_id="w1", status="ok", **held)
        assert repo.record_trial(session, worker_id="w2", status="ok", latency_us=5.0, **held)
        assert repo.record_trial(session, worker_id="w2", status="timeout", **held)
    with session_scope(engine) as session:
        assert not repo.end_trial(session, task_id=task.task_id, worker_id="w1")
        assert not decide(session, task.task_id, env, [retime(C1, 5.0)], decision(C1, 5.0), "w1")
        (stored,) = repo.task_trials(session, task_id=task.task_id)  # once, as first recorded
        assert (stored.config, stored.status, stored.latency_us) == (C1, "ok", 5.0)
        assert repo.release_tasks(session, worker_id="w2") == 1
    for end in ("release", "finish"):
        assert _claim(engine, "w3", T0) is not None
        with session_scope(engine) as session:
            session.execute(update(Task).where(Task.task_id == task.task_id).values(FLYING))
            if end == "release":
                assert repo.release_tasks(session, worker_id="w3") == 1
            else:
                assert repo.finish_task(session, task_id=task.task_id, worker_id="w3")
            flight = session.execute(FLIGHT.where(Task.task_id == task.task_id)).one()
            assert tuple(flight) == (None, None)


def _claim_and_finish(url: str, worker_id: str, barrier: Any, out: Any) -> None:
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


def test_two_processes_claim_disjoint_tasks(engine: Engine, store_url: str) -> None:
    with session_scope(engine) as session:
        sweep(session, shapes=[(256, 512), (512, 256)], m_values=list(range(1, 31)))
    results = dict(run_two(_claim_and_finish, (store_url, "p1"), (store_url, "p2")))
    first, second = results["p1"], results["p2"]
    assert first and second and not set(first) & set(second)  # both took part, none twice
    assert len(first) + len(second) == 60
    with session_scope(engine) as session:
        assert session.execute(select(Task.state, Task.attempts)).all() == [("done", 1)] * 60


def test_a_trial_is_stored_once_and_read_back_in_vllms_key_order(engine: Engine) -> None:
    with session_scope(engine) as session:
        task_id = claim_all(session, sweep(session, m_values=[1]))[1]
        env = environment(session)
    trial: dict[str, Any] = {"task_id": task_id, "environment_id": env, "is_default": True}
    trial |= {"config": dict(reversed(list(C0.items()))), "status": "ok", "latency_us": 12.5}
    trial |= {"p20_us": 12.0, "p80_us": 13.0, "rel_error": 1e-3, "measure_s": 0.4}
    with session_scope(engine) as session:
        assert repo.record_trial(session, **trial) is True
    with session_scope(engine) as session:  # a resumed task records the same config again
        assert repo.record_trial(session, **{**trial, "latency_us": 99.0}) is False
        failed = {**trial, "config": C3, "is_default": False, "status": "compile_error"}
        assert repo.record_trial(session, **failed | {"latency_us": None, "error": "smem"})
        with pytest.raises(ValueError, match="'fast' is not a valid TrialStatus"):
            repo.record_trial(session, **{**trial, "status": "fast"})
    with session_scope(engine) as session:
        assert session.scalar(select(func.count()).select_from(Trial)) == 2
        first, second = repo.task_trials(session, task_id=task_id)
    assert [list(first.config), list(second.config)] == [list(CONFIG_KEYS)] * 2
    got = (first.config, first.is_default, first.status, first.latency_us, first.p20_us)
    assert got == (C0, True, "ok", 12.5, 12.0)
    assert (first.p80_us, first.rel_error, first.error, first.measure_s) == (13.0, 1e-3, None, 0.4)
    got = (second.config, second.status, second.latency_us, second.error)
    assert got == (C3, "compile_error", None, "smem")


def _counts(engine: Engine) -> tuple[int, int]:
    with session_scope(engine) as session:
        count = select(func.count())
        return tuple(session.scalar(count.select_from(table)) or 0 for table in (Retime, Decision))


def test_a_decision_is_stored_with_its_retimes_and_replaced_by_the_next(
    engine: Engine, held: dict
) -> None:
    first = [retime(C1, 7.1), retime(C2, 7.3), retime(C0, 10.2, is_default=True)]
    t1, env = held["t1"], held["env"]
    with session_scope(engine) as session:
        session.execute(update(Task).where(Task.task_id == t1).values(FLYING))
        assert decide(session, t1, env, first, decision(C1, 7.1, 10.2, runner_up=C2))
        info = repo.task_decision(session, task_id=t1)
        assert repo.task_decision(session, task_id=held["t16"]) is None
        assert tuple(session.execute(FLIGHT.where(Task.task_id == t1)).one()) == (None, None)
    assert info is not None and info.created_at.utcoffset() is not None
    assert (info.task_id, info.environment_id, info.config, info.latency_us) == (t1, env, C1, 7.1)
    got = (info.default_latency_us, info.runner_up, info.spread_us, info.kept, info.note)
    assert got == (10.2, C2, 0.4, "fastest", "fastest kept")
    assert [
        (r.config, r.is_default, r.rounds, r.latency_us, r.p20_us, r.p80_us) for r in info.retimes
    ] == [
        (C1, False, 5, 7.1, 6.6, 7.6),
        (C2, False, 5, 7.3, 6.8, 7.8),
        (C0, True, 5, 10.2, 9.7, 10.7),
    ]
    second = [retime(C2, 6.9), retime(C1, 7.0), retime(C0, 10.1, is_default=True)]
    with session_scope(engine) as session:  # a resumed task re-times
        assert decide(session, t1, env, second, decision(C2, 6.9, 10.1, runner_up=C1))
        info = repo.task_decision(session, task_id=t1)
    assert _counts(engine) == (3, 1)
    assert info is not None and (info.config, info.latency_us, info.runner_up) == (C2, 6.9, C1)
    assert [(r.config, r.latency_us) for r in info.retimes] == [(C2, 6.9), (C1, 7.0), (C0, 10.1)]
    with session_scope(engine) as session:  # a finished task is not held: nothing is written
        assert repo.finish_task(session, task_id=held["t16"], worker_id="w")
        assert not decide(session, held["t16"], env, [retime(C1, 7.1)], decision(C1, 7.1))
    assert _counts(engine) == (3, 1)
    with session_scope(engine) as session:
        session.execute(delete(Sweep))  # deleting a sweep deletes its tasks and decisions
        assert session.scalar(select(func.count()).select_from(Task)) == 0
    assert _counts(engine) == (0, 0)
