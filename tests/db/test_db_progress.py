"""Read queries: winners per (N, K, block_shape, M), M-grid coverage, progress, devices."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from db import repo
from db.connection import session_scope
from db.models import Task
from tests.storefill import DENSE_SWEEP

DEFAULT = {
    "BLOCK_SIZE_M": 64,
    "BLOCK_SIZE_N": 128,
    "BLOCK_SIZE_K": 128,
    "GROUP_SIZE_M": 32,
    "num_warps": 4,
    "num_stages": 2,
}
C1 = {**DEFAULT, "BLOCK_SIZE_M": 16}
C2 = {**DEFAULT, "BLOCK_SIZE_M": 32}
C3 = {**DEFAULT, "num_stages": 3}
C4 = {**DEFAULT, "num_warps": 8}


def _sweep(
    session: Session,
    *,
    device_name: str = "NVIDIA_L20",
    model: str,
    strategy: str,
    m_values: list[int],
    shapes: list[tuple[int, int]],
    out_dtype: str = "bfloat16",
    block_shape: tuple[int, int] = (128, 128),
) -> int:
    info, _ = repo.create_sweep(
        session,
        device_name=device_name,
        model=model,
        tp=1,
        strategy=strategy,
        budget=4,
        space="vllm",
        seed=0,
        m_values=m_values,
        out_dtype=out_dtype,
        block_shape=block_shape,
        shapes=shapes,
        **DENSE_SWEEP,
    )
    return info.sweep_id


def _task(session: Session, sweep_id: int, n: int, k: int, m: int) -> int:
    return session.scalars(
        select(Task.task_id).where(Task.sweep_id == sweep_id, Task.N == n, Task.K == k, Task.M == m)
    ).one()


def _finish(engine: Engine, sweep_id: int, task_ids: set[int]) -> None:
    """Claim every task of the sweep; mark the given ones done, give the others back."""
    with session_scope(engine) as session:
        while (
            task := repo.claim_task(session, sweep_id=sweep_id, worker_id="w", lease_s=60)
        ) is not None:
            if task.task_id in task_ids:
                repo.finish_task(session, task_id=task.task_id, worker_id="w")
        repo.release_tasks(session, worker_id="w")


@pytest.fixture
def store(engine: Engine) -> dict[str, int]:
    """Two bfloat16 sweeps and one float16 sweep on NVIDIA_L20, one on the interpreter."""
    ids: dict[str, int] = {}
    with session_scope(engine) as session:
        env = repo.get_or_create_environment(
            session,
            device_name="NVIDIA_L20",
            gpu_name="NVIDIA L20",
            compute_capability="8.9",
            driver="570",
            cuda="12.8",
            torch="2.11.0",
            triton="3.6.0",
            tuner="0.1.0",
            kernel_hash="k1",
        )
        a = _sweep(
            session,
            model="ModelA",
            strategy="grid",
            m_values=[1, 16],
            shapes=[(256, 512), (512, 256)],
        )
        b = _sweep(
            session, model="ModelB", strategy="optuna", m_values=[16, 32], shapes=[(256, 512)]
        )
        c = _sweep(
            session,
            model="ModelA",
            strategy="grid",
            m_values=[1],
            shapes=[(256, 512)],
            out_dtype="float16",
        )
        other = _sweep(
            session,
            device_name="TRITON_INTERPRETER",
            model="ModelA",
            strategy="grid",
            m_values=[1],
            shapes=[(256, 512)],
        )
        ids.update(a=a, b=b, c=c, env=env)
        a1, a16 = _task(session, a, 256, 512, 1), _task(session, a, 256, 512, 16)
        b16, b32 = _task(session, b, 256, 512, 16), _task(session, b, 256, 512, 32)
        ids.update(a1=a1, a16=a16, b16=b16, b32=b32)
        trials = [
            (a1, DEFAULT, True, "ok", 10.0),
            (a1, C1, False, "ok", 8.0),
            (a1, C2, False, "wrong_result", 1.0),  # fast but wrong: never a winner
            (a1, C3, False, "compile_error", None),
            (a1, C4, False, "ok", 8.0),  # ties C1, recorded later: C1 wins
            (a16, DEFAULT, True, "ok", 20.0),
            (a16, C1, False, "ok", 15.0),
            (b16, DEFAULT, True, "ok", 18.0),
            (b16, C2, False, "ok", 12.0),
            (b32, C1, False, "ok", 30.0),  # no default trial in this task
            (_task(session, c, 256, 512, 1), C3, False, "ok", 5.0),  # float16 sweep
            (_task(session, other, 256, 512, 1), C3, False, "ok", 0.5),  # other device
        ]
        for task_id, config, is_default, status, latency_us in trials:
            assert repo.record_trial(
                session,
                task_id=task_id,
                environment_id=env,
                config=config,
                is_default=is_default,
                status=status,
                latency_us=latency_us,
            )
    _finish(engine, a, {a1})
    _finish(engine, b, {b32})
    return ids


def test_winners_per_m_over_two_sweeps(engine: Engine, store: dict[str, int]) -> None:
    with session_scope(engine) as session:
        rows = repo.winners(session, device_name="NVIDIA_L20", out_dtype="bfloat16")
    summary = [
        (
            r.N,
            r.K,
            r.block_shape,
            r.M,
            r.config,
            r.latency_us,
            r.default_latency_us,
            r.default_config,
            r.is_default,
            r.task_id,
        )
        for r in rows
    ]
    assert summary == [
        (256, 512, (128, 128), 1, C1, 8.0, 10.0, DEFAULT, False, store["a1"]),
        (256, 512, (128, 128), 16, C2, 12.0, 18.0, DEFAULT, False, store["b16"]),
        (256, 512, (128, 128), 32, C1, 30.0, None, None, False, store["b32"]),
    ]
    assert {r.device_name for r in rows} == {"NVIDIA_L20"}
    assert list(rows[0].config) == list(DEFAULT)


def test_winners_filters(engine: Engine, store: dict[str, int]) -> None:
    with session_scope(engine) as session:
        every = repo.winners(session, device_name="NVIDIA_L20")
        interpreter = repo.winners(session, device_name="TRITON_INTERPRETER")
        other_kernel = repo.winners(session, device_name="NVIDIA_L20", kernel_hash="k2")
        unknown = repo.winners(session, device_name="NVIDIA_H200")
    # Without a dtype filter the float16 sweep's 5 us trial wins M=1.
    assert [(r.M, r.latency_us, r.default_latency_us) for r in every] == [
        (1, 5.0, None),
        (16, 12.0, 18.0),
        (32, 30.0, None),
    ]
    assert [(r.M, r.latency_us) for r in interpreter] == [(1, 0.5)]
    assert other_kernel == [] and unknown == []


def test_winner_can_be_the_default(engine: Engine, store: dict[str, int]) -> None:
    with session_scope(engine) as session:
        repo.record_trial(
            session,
            task_id=store["a16"],
            environment_id=store["env"],
            config=C4,
            is_default=False,
            status="timeout",
        )
        sweep_id = _sweep(
            session, model="ModelC", strategy="grid", m_values=[64], shapes=[(256, 512)]
        )
        repo.record_trial(
            session,
            task_id=_task(session, sweep_id, 256, 512, 64),
            environment_id=store["env"],
            config=DEFAULT,
            is_default=True,
            status="ok",
            latency_us=40.0,
        )
        row = repo.winners(session, device_name="NVIDIA_L20", out_dtype="bfloat16")[-1]
    assert (row.M, row.is_default, row.latency_us, row.default_latency_us) == (64, True, 40.0, 40.0)


def test_shape_coverage(engine: Engine, store: dict[str, int]) -> None:
    with session_scope(engine) as session:
        coverage = repo.shape_coverage(session, device_name="NVIDIA_L20", out_dtype="bfloat16")
        all_dtypes = repo.shape_coverage(session, device_name="NVIDIA_L20")
    assert [(c.N, c.K, c.block_shape, c.m_requested, c.m_done, c.models) for c in coverage] == [
        (256, 512, (128, 128), (1, 16, 32), (1, 32), ("ModelA", "ModelB")),
        (512, 256, (128, 128), (1, 16), (), ("ModelA",)),
    ]
    assert [(c.N, c.m_requested) for c in all_dtypes] == [(256, (1, 16, 32)), (512, (1, 16))]


def test_sweep_progress_and_devices(engine: Engine, store: dict[str, int]) -> None:
    with session_scope(engine) as session:
        progress = repo.sweep_progress(session, sweep_id=store["a"])
        names = repo.list_device_names(session)
        repo.get_or_create_device(session, device_name="NVIDIA_H200")  # no sweep: not listed
        assert repo.list_device_names(session) == names
        with pytest.raises(LookupError):
            repo.sweep_progress(session, sweep_id=999)
    assert progress == repo.SweepProgress(
        tasks_total=4,
        tasks_pending=3,
        tasks_running=0,
        tasks_done=1,
        tasks_failed=0,
        trials_total=7,
        trials_ok=5,
    )
    assert names == ["NVIDIA_L20", "TRITON_INTERPRETER"]
