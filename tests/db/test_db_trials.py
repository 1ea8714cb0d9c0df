"""Trials: idempotent recording and reading back in vLLM's key order."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Engine, func, select

from db import repo
from db.connection import session_scope
from db.models import Trial
from tests.storefill import DENSE_SWEEP
from tuner.core import CONFIG_KEYS

DEFAULT = {
    "BLOCK_SIZE_M": 64,
    "BLOCK_SIZE_N": 128,
    "BLOCK_SIZE_K": 128,
    "GROUP_SIZE_M": 32,
    "num_warps": 4,
    "num_stages": 2,
}


def _task_and_environment(engine: Engine) -> tuple[int, int]:
    with session_scope(engine) as session:
        repo.create_sweep(
            session,
            device_name="TRITON_INTERPRETER",
            model="tiny",
            tp=1,
            strategy="grid",
            budget=4,
            space="vllm",
            seed=0,
            m_values=[1],
            out_dtype="float16",
            block_shape=(128, 128),
            shapes=[(256, 512)],
            **DENSE_SWEEP,
        )
        task = repo.claim_task(session, sweep_id=None, worker_id="w", lease_s=60)
        environment_id = repo.get_or_create_environment(
            session,
            device_name="TRITON_INTERPRETER",
            gpu_name="",
            compute_capability="",
            driver="",
            cuda="",
            torch="2.13.0",
            triton="3.6.0",
            tuner="0.1.0",
            kernel_hash="k",
        )
    assert task is not None
    return task.task_id, environment_id


def test_record_trial_is_idempotent(engine: Engine) -> None:
    task_id, environment_id = _task_and_environment(engine)
    reversed_keys = dict(reversed(list(DEFAULT.items())))
    trial: dict[str, Any] = {
        "task_id": task_id,
        "environment_id": environment_id,
        "config": reversed_keys,
        "is_default": True,
        "status": "ok",
        "latency_us": 12.5,
        "p20_us": 12.0,
        "p80_us": 13.0,
        "rel_error": 1e-3,
        "measure_s": 0.4,
    }
    with session_scope(engine) as session:
        assert repo.record_trial(session, **trial) is True
    with session_scope(engine) as session:
        assert repo.record_trial(session, **{**trial, "latency_us": 99.0}) is False
        assert repo.record_trial(
            session,
            task_id=task_id,
            environment_id=environment_id,
            config={**DEFAULT, "num_stages": 3},
            is_default=False,
            status="compile_error",
            error="out of shared memory",
        )
    with session_scope(engine) as session:
        assert session.scalar(select(func.count()).select_from(Trial)) == 2
        trials = repo.task_trials(session, task_id=task_id)
    assert [list(t.config) for t in trials] == [list(CONFIG_KEYS)] * 2
    first, second = trials
    assert first.config == DEFAULT
    assert (first.is_default, first.status, first.latency_us, first.p20_us, first.p80_us) == (
        True,
        "ok",
        12.5,
        12.0,
        13.0,
    )
    assert (first.rel_error, first.error, first.measure_s) == (1e-3, None, 0.4)
    assert (second.is_default, second.status, second.latency_us, second.error) == (
        False,
        "compile_error",
        None,
        "out of shared memory",
    )


@pytest.mark.parametrize(
    "change",
    [
        {"status": "fast"},
        {"config": {k: v for k, v in DEFAULT.items() if k != "num_stages"}},
        {"config": {**DEFAULT, "kpack": 2}},
        {"config": {**DEFAULT, "num_warps": 0}},
    ],
)
def test_record_trial_rejects_bad_input(engine: Engine, change: dict[str, Any]) -> None:
    task_id, environment_id = _task_and_environment(engine)
    trial = {
        "task_id": task_id,
        "environment_id": environment_id,
        "config": DEFAULT,
        "is_default": False,
        "status": "ok",
        "latency_us": 1.0,
    }
    with session_scope(engine) as session, pytest.raises(ValueError):
        repo.record_trial(session, **{**trial, **change})
