"""A shape without block scales (block_shape None) in the store: written as block_n = block_k = 0
by one pair of functions, read back as None, hashed into a sweep's key as null while every
pair hashes as it always did."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Engine, select

from db import repo
from db.connection import session_scope
from db.models import Sweep, block_columns, block_shape_of
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
    "shapes": [(5120, 3072), (17408, 5120)],
}


def test_no_block_shape_is_stored_as_0_0_and_read_back_as_none() -> None:
    assert block_columns(None) == (0, 0)
    assert block_shape_of(0, 0) is None
    assert block_columns((128, 128)) == (128, 128)
    assert block_shape_of(128, 128) == (128, 128)
    assert block_columns([64, 128]) == (64, 128)  # a list (JSON) gives a pair of ints
    assert block_shape_of(*block_columns((1, 1))) == (1, 1)
    assert block_shape_of(*block_columns(None)) is None


@pytest.mark.parametrize(
    ("block_shape", "key"),
    [  # the keys sweeps stored before None existed: each must still find its sweep
        ((128, 128), "00b38e142113660ac063704f3719224d363c1f32e63ebdf49d83b9f30cefdffd"),
        ((64, 128), "69f3156cbc1fb971112de8679035a51a5749f0869907591642a3a5aa6571490c"),
        ([1, 1], "46d14567ecbc7dd758fcdce82102b7029a93371fbe37427a5f6c322aba23523a"),
    ],
)
def test_a_pair_keeps_its_sweep_key(block_shape: Any, key: str) -> None:
    assert repo.sweep_key(**SWEEP, block_shape=block_shape, **DENSE_SWEEP) == key


def test_no_block_shape_has_a_sweep_key_of_its_own() -> None:
    none = repo.sweep_key(**SWEEP, block_shape=None, **DENSE_SWEEP)
    assert none == "90a38e89467bf715fb3b5a84ae094fa02f34b6664bda02c37562bb454d0731f9"
    pairs = {(0, 0), (1, 1), (128, 128)}
    assert none not in {repo.sweep_key(**SWEEP, block_shape=p, **DENSE_SWEEP) for p in pairs}


def test_a_per_tensor_sweep_round_trips_none(engine: Engine) -> None:
    fields = {**SWEEP, "family": "pt", "shape_params": "", "family_in_key": True}
    with session_scope(engine) as session:
        info, created = repo.create_sweep(session, **fields, block_shape=None)
        again, created_again = repo.create_sweep(session, **fields, block_shape=None)
        blocked, _ = repo.create_sweep(session, **fields, block_shape=(128, 128))
    assert (created, created_again, again.sweep_id) == (True, False, info.sweep_id)
    assert info.block_shape is None and blocked.block_shape == (128, 128)
    assert blocked.sweep_id != info.sweep_id
    with session_scope(engine) as session:
        rows = session.execute(
            select(Sweep.sweep_id, Sweep.block_n, Sweep.block_k).order_by(Sweep.sweep_id)
        ).all()
        task = repo.claim_task(session, sweep_id=info.sweep_id, worker_id="w", lease_s=60)
        assert repo.get_sweep(session, sweep_id=info.sweep_id).block_shape is None
    assert [tuple(row) for row in rows] == [(info.sweep_id, 0, 0), (blocked.sweep_id, 128, 128)]
    assert task is not None and task.block_shape is None


@pytest.mark.parametrize("block_shape", [(0, 0), (0, 128), (128, 0)])
def test_a_zero_group_is_not_a_block_shape(engine: Engine, block_shape: tuple) -> None:
    # Only None is written as 0/0: a pair with a zero group is refused, never read as None.
    with (
        session_scope(engine) as session,
        pytest.raises(ValueError, match="block_shape must be positive integers"),
    ):
        repo.create_sweep(session, **SWEEP, block_shape=block_shape, **DENSE_SWEEP)
