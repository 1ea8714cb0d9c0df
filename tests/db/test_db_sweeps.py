"""Devices, environments and sweeps: get-or-create semantics and the rows they leave."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Engine, func, select

from db import repo
from db.connection import session_scope
from db.models import Device, Environment, Sweep, Task
from tests.storefill import DENSE_SWEEP

SWEEP: dict[str, Any] = {
    "device_name": "NVIDIA_L20",
    "model": "Qwen3.8-27B-FP8",
    "tp": 2,
    "strategy": "optuna",
    "budget": 40,
    "space": "vllm",
    "seed": 0,
    "m_values": [16, 1, 4096],
    "out_dtype": "bfloat16",
    "block_shape": (128, 128),
    "shapes": [(5120, 3072), (17408, 5120)],
    **DENSE_SWEEP,
}

ENV = {
    "device_name": "NVIDIA_L20",
    "gpu_name": "NVIDIA L20",
    "compute_capability": "8.9",
    "driver": "570.1",
    "cuda": "12.8",
    "torch": "2.11.0",
    "triton": "3.6.0",
    "tuner": "0.1.0",
    "kernel_hash": "ab" * 32,
}


def test_get_or_create_device_and_environment(engine: Engine) -> None:
    with session_scope(engine) as session:
        device_id = repo.get_or_create_device(session, device_name="NVIDIA_L20")
        assert repo.get_or_create_device(session, device_name="NVIDIA_L20") == device_id
        environment_id = repo.get_or_create_environment(session, **ENV)
    with session_scope(engine) as session:
        assert repo.get_or_create_environment(session, **ENV) == environment_id
        other = repo.get_or_create_environment(session, **{**ENV, "triton": "3.7.0"})
        assert other != environment_id
        interpreter = repo.get_or_create_environment(
            session, **{**ENV, "device_name": "TRITON_INTERPRETER", "compute_capability": ""}
        )
    with session_scope(engine) as session:
        assert session.scalars(select(Device.device_name).order_by(Device.device_id)).all() == [
            "NVIDIA_L20",
            "TRITON_INTERPRETER",
        ]
        rows = session.execute(
            select(Environment.environment_id, Environment.device_id, Environment.triton)
        ).all()
        assert sorted(rows) == sorted(
            [
                (environment_id, device_id, "3.6.0"),
                (other, device_id, "3.7.0"),
                (interpreter, device_id + 1, "3.6.0"),
            ]
        )


@pytest.mark.parametrize("name", ["", "NVIDIA L20", "NVIDIA/L20"])
def test_device_name_must_be_vllm_key(engine: Engine, name: str) -> None:
    with session_scope(engine) as session, pytest.raises(ValueError, match="vLLM's key"):
        repo.get_or_create_device(session, device_name=name)


def test_create_sweep_is_idempotent(engine: Engine) -> None:
    with session_scope(engine) as session:
        info, created = repo.create_sweep(session, **SWEEP)
    assert created
    assert info.m_values == (1, 16, 4096)
    assert info.block_shape == (128, 128)
    assert info.device_name == "NVIDIA_L20"
    assert info.created_at.utcoffset() is not None
    assert len(info.sweep_key) == 64
    reordered = {**SWEEP, "m_values": [4096, 16, 1, 16], "shapes": SWEEP["shapes"][::-1]}
    with session_scope(engine) as session:
        again, created_again = repo.create_sweep(session, **reordered)
        other, created_other = repo.create_sweep(session, **{**SWEEP, "seed": 1})
    assert (again, created_again) == (info, False)
    assert created_other and other.sweep_id != info.sweep_id
    with session_scope(engine) as session:
        assert repo.get_sweep(session, sweep_id=info.sweep_id) == info
        assert repo.get_sweep(session, sweep_id=999) is None
        assert session.scalar(select(func.count()).select_from(Sweep)) == 2
        tasks = session.execute(
            select(Task.N, Task.K, Task.M, Task.state, Task.attempts)
            .where(Task.sweep_id == info.sweep_id)
            .order_by(Task.task_id)
        ).all()
    assert tasks == [
        (n, k, m, "pending", 0) for n, k in [(5120, 3072), (17408, 5120)] for m in (1, 16, 4096)
    ]


@pytest.mark.parametrize(
    "change",
    [
        {"out_dtype": "float32"},
        {"m_values": []},
        {"shapes": []},
        {"m_values": [0, 16]},
        {"block_shape": (128, -1)},
        {"budget": 0},
    ],
)
def test_create_sweep_rejects_bad_parameters(engine: Engine, change: dict[str, Any]) -> None:
    with session_scope(engine) as session, pytest.raises(ValueError):
        repo.create_sweep(session, **{**SWEEP, **change})
