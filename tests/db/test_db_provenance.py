"""The provenance filter of the store: winners, coverage and warm starts from trials and decisions
of the current kernel hash and Triton major.minor only, and a count of what it leaves out."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from db import repo
from db.connection import session_scope
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
CURRENT = {"kernel_hash": "k1", "triton_minor": "3.6"}


def _environment(session: Session, kernel_hash: str, triton: str) -> int:
    return repo.get_or_create_environment(
        session,
        device_name="NVIDIA_L20",
        gpu_name="NVIDIA L20",
        compute_capability="8.9",
        driver="580",
        cuda="12.9",
        torch="2.11.0",
        triton=triton,
        tuner="0.1.0",
        kernel_hash=kernel_hash,
    )


@pytest.fixture
def store(engine: Engine) -> dict[str, int]:
    """M = 1, 16, 32, 64 of one shape; environments of the current kernel on 3.6.1+git (and
    3.6), the current kernel on 3.60 and 3.5, an older kernel on 3.6.0.

    M=1: a stale (old kernel) trial is faster than the current ones.
    M=16: only trials of triton 3.60 and 3.5: no current winner.
    M=32: current trials only, in the 3.6 environment (no patch version).
    M=64: task left pending with a stale decision and a current trial.
    """
    with session_scope(engine) as session:
        env = {
            "current": _environment(session, "k1", "3.6.1+git3f2a"),
            "plain": _environment(session, "k1", "3.6"),
            "sixty": _environment(session, "k1", "3.60.0"),
            "older_triton": _environment(session, "k1", "3.5.0"),
            "old_kernel": _environment(session, "k0", "3.6.0"),
        }
        sweep, _ = repo.create_sweep(
            session,
            device_name="NVIDIA_L20",
            model="m",
            tp=1,
            strategy="grid",
            budget=4,
            space="vllm",
            seed=0,
            m_values=[1, 16, 32, 64],
            out_dtype="bfloat16",
            block_shape=(128, 128),
            shapes=[(256, 512)],
            **DENSE_SWEEP,
        )
        tasks = {}
        while (
            task := repo.claim_task(session, sweep_id=sweep.sweep_id, worker_id="w", lease_s=600)
        ) is not None:
            tasks[task.M] = task.task_id
        plan = {
            1: [
                ("current", DEFAULT, True, 10.0),
                ("current", C1, False, 8.0),
                ("old_kernel", C2, False, 5.0),
            ],
            16: [("sixty", C1, False, 9.0), ("older_triton", DEFAULT, True, 12.0)],
            32: [("plain", DEFAULT, True, 30.0), ("plain", C3, False, 25.0)],
            64: [("current", C4, False, 40.0)],
        }
        for M, trials in plan.items():
            for name, config, is_default, latency_us in trials:
                repo.record_trial(
                    session,
                    task_id=tasks[M],
                    environment_id=env[name],
                    config=config,
                    is_default=is_default,
                    status="ok",
                    latency_us=latency_us,
                )
        repo.record_trial(
            session,
            task_id=tasks[1],
            environment_id=env["old_kernel"],
            config=C3,
            is_default=False,
            status="wrong_result",
        )
        assert repo.record_decision(
            session,
            task_id=tasks[64],
            worker_id="w",
            environment_id=env["old_kernel"],
            retimes=[
                {
                    "config": C1,
                    "is_default": False,
                    "rounds": 3,
                    "latency_us": 35.0,
                    "p20_us": 34.0,
                    "p80_us": 36.0,
                }
            ],
            decision={
                "config": C1,
                "latency_us": 35.0,
                "default_latency_us": None,
                "runner_up": None,
                "spread_us": 1.0,
                "kept": "fastest",
                "note": "",
            },
        )
        for M in (1, 16, 32):
            repo.finish_task(session, task_id=tasks[M], worker_id="w")
        repo.release_tasks(session, worker_id="w")
    return {**env, **{f"t{M}": task_id for M, task_id in tasks.items()}}


def _summary(rows: list[repo.WinnerRow]) -> list[tuple]:
    return [(r.M, r.config, r.latency_us, r.decided) for r in rows]


def test_only_current_trials_win(engine: Engine, store: dict[str, int]) -> None:
    with session_scope(engine) as session:
        current = repo.winners(session, device_name="NVIDIA_L20", **CURRENT)
        stale = repo.winners(session, device_name="NVIDIA_L20")
    assert _summary(current) == [(1, C1, 8.0, False), (32, C3, 25.0, False), (64, C4, 40.0, False)]
    assert [r.default_latency_us for r in current] == [10.0, 30.0, None]
    assert [r.environment_id for r in current] == [
        store["current"],
        store["plain"],
        store["current"],
    ]
    assert [r.environment_id for r in stale] == [
        store["old_kernel"],
        store["sixty"],
        store["plain"],
        store["old_kernel"],
    ]
    assert _summary(stale) == [
        (1, C2, 5.0, False),
        (16, C1, 9.0, False),
        (32, C3, 25.0, False),
        (64, C1, 35.0, True),
    ]


def test_each_half_of_the_filter(engine: Engine, store: dict[str, int]) -> None:
    with session_scope(engine) as session:
        kernel_only = repo.winners(session, device_name="NVIDIA_L20", kernel_hash="k1")
        triton_only = repo.winners(session, device_name="NVIDIA_L20", triton_minor="3.6")
        sixty = repo.winners(session, device_name="NVIDIA_L20", triton_minor="3.60")
        nothing = repo.winners(session, device_name="NVIDIA_L20", kernel_hash="k9")
    assert _summary(kernel_only) == [
        (1, C1, 8.0, False),
        (16, C1, 9.0, False),
        (32, C3, 25.0, False),
        (64, C4, 40.0, False),
    ]
    assert _summary(triton_only) == [
        (1, C2, 5.0, False),
        (32, C3, 25.0, False),
        (64, C1, 35.0, True),
    ]
    assert _summary(sixty) == [(16, C1, 9.0, False)]
    assert nothing == []


def test_matching_environments(engine: Engine, store: dict[str, int]) -> None:
    from db.winners import matching_environments

    with session_scope(engine) as session:
        assert matching_environments(session, kernel_hash=None, triton_minor=None) is None
        assert matching_environments(session, **CURRENT) == sorted(
            [store["current"], store["plain"]]
        )
        assert matching_environments(session, kernel_hash=None, triton_minor="3.5") == [
            store["older_triton"]
        ]
        for bad in ("3", "3.6.0", "three.six", ""):
            with pytest.raises(ValueError, match="is not major.minor"):
                repo.winners(session, device_name="NVIDIA_L20", triton_minor=bad)


def test_stale_trials_counts_the_ok_trials_left_out(engine: Engine, store: dict[str, int]) -> None:
    with session_scope(engine) as session:
        assert repo.stale_trials(session, device_name="NVIDIA_L20", **CURRENT) == 3
        assert (
            repo.stale_trials(
                session, device_name="NVIDIA_L20", kernel_hash="k1", triton_minor=None
            )
            == 1
        )
        assert (
            repo.stale_trials(
                session, device_name="NVIDIA_L20", kernel_hash=None, triton_minor=None
            )
            == 0
        )
        assert repo.stale_trials(session, device_name="NVIDIA_H200", **CURRENT) == 0


def test_coverage_counts_current_trials_only(engine: Engine, store: dict[str, int]) -> None:
    with session_scope(engine) as session:
        (current,) = repo.shape_coverage(session, device_name="NVIDIA_L20", **CURRENT)
        (every,) = repo.shape_coverage(session, device_name="NVIDIA_L20")
        (old,) = repo.shape_coverage(session, device_name="NVIDIA_L20", kernel_hash="k0")
    assert (current.m_requested, current.m_done, current.m_stale) == (
        (1, 16, 32, 64),
        (1, 32),
        (16,),
    )
    assert (every.m_requested, every.m_done, every.m_stale) == ((1, 16, 32, 64), (1, 16, 32), ())
    # Old kernel: M=1 has an old trial (done); M=64 has only an old decision (task pending);
    # M=16 and M=32 have only trials of the current kernel.
    assert (old.m_done, old.m_stale) == ((1,), (16, 32))


def test_task_winners_filter(engine: Engine, store: dict[str, int]) -> None:
    with session_scope(engine) as session:
        rows = repo.task_winners(
            session,
            device_name="NVIDIA_L20",
            block_shape=(128, 128),
            out_dtype="bfloat16",
            **CURRENT,
            family="dense",
        )
        every = repo.task_winners(
            session,
            device_name="NVIDIA_L20",
            block_shape=(128, 128),
            out_dtype="bfloat16",
            family="dense",
        )
    assert [(r.M, r.config, r.latency_us) for r in rows] == [(1, C1, 8.0), (32, C3, 25.0)]
    assert [(r.M, r.latency_us) for r in every] == [(1, 5.0), (16, 9.0), (32, 25.0)]
