"""Kernel families in the store: tasks carry their family, sweeps of another
family get their own key, and winners, coverage and warm starts never mix families."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, text

from db import repo
from db.connection import MIGRATIONS_DIR, connect, session_scope, upgrade
from tests.storefill import DENSE_SWEEP

DEFAULT = {
    "BLOCK_SIZE_M": 64,
    "BLOCK_SIZE_N": 128,
    "BLOCK_SIZE_K": 128,
    "GROUP_SIZE_M": 32,
    "num_warps": 4,
    "num_stages": 2,
}
FAST = {**DEFAULT, "BLOCK_SIZE_M": 16}
SWEEP = {
    "device_name": "NVIDIA_H200",
    "model": "m",
    "tp": 1,
    "strategy": "grid",
    "budget": 4,
    "space": "vllm",
    "seed": 0,
    "m_values": [16],
    "out_dtype": "bfloat16",
    "block_shape": (128, 128),
    "shapes": [(512, 256)],
}
MOE_SWEEP = {"family": "moe", "shape_params": "E=8,top_k=2", "family_in_key": True}
ENVIRONMENT = {
    "device_name": "NVIDIA_H200",
    "gpu_name": "NVIDIA H200",
    "compute_capability": "9.0",
    "driver": "570",
    "cuda": "12.8",
    "torch": "2.11.0",
    "triton": "3.6.0",
    "tuner": "0.1.0",
    "kernel_hash": "k",
}


def _finish(engine: Engine, sweep_id: int, latency_us: float) -> repo.TaskInfo:
    """Claim the sweep's one task, store the default and a faster config, mark it done."""
    with session_scope(engine) as session:
        task = repo.claim_task(session, sweep_id=sweep_id, worker_id="w", lease_s=60)
        environment_id = repo.get_or_create_environment(session, **ENVIRONMENT)
        for config, is_default, us in ((DEFAULT, True, 2 * latency_us), (FAST, False, latency_us)):
            repo.record_trial(
                session,
                task_id=task.task_id,
                environment_id=environment_id,
                config=config,
                is_default=is_default,
                status="ok",
                latency_us=us,
            )
        repo.finish_task(session, task_id=task.task_id, worker_id="w", state="done")
    return task


def test_tasks_of_a_sweep_carry_its_family(engine: Engine) -> None:
    with session_scope(engine) as session:
        dense, _ = repo.create_sweep(session, **SWEEP, **DENSE_SWEEP)
        moe, created = repo.create_sweep(session, **SWEEP, **MOE_SWEEP)
    assert created and moe.sweep_id != dense.sweep_id
    dense_task, moe_task = _finish(engine, dense.sweep_id, 10.0), _finish(engine, moe.sweep_id, 7.0)
    assert (dense_task.family, dense_task.shape_params) == ("dense", "")
    assert (moe_task.family, moe_task.shape_params) == ("moe", "E=8,top_k=2")
    with session_scope(engine) as session:
        winners = repo.winners(session, device_name="NVIDIA_H200")
        coverage = repo.shape_coverage(session, device_name="NVIDIA_H200")
        warm_dense = repo.task_winners(
            session,
            device_name="NVIDIA_H200",
            block_shape=(128, 128),
            out_dtype="bfloat16",
            family="dense",
        )
        warm_moe = repo.task_winners(
            session,
            device_name="NVIDIA_H200",
            block_shape=(128, 128),
            out_dtype="bfloat16",
            family="moe",
            shape_params="E=8,top_k=2",
        )
    assert [(w.family, w.shape_params, w.N, w.K, w.M, w.latency_us) for w in winners] == [
        ("dense", "", 512, 256, 16, 10.0),
        ("moe", "E=8,top_k=2", 512, 256, 16, 7.0),
    ]
    assert [(c.family, c.shape_params, c.m_done) for c in coverage] == [
        ("dense", "", (16,)),
        ("moe", "E=8,top_k=2", (16,)),
    ]
    assert [w.latency_us for w in warm_dense] == [10.0]
    assert [w.latency_us for w in warm_moe] == [7.0]


def _digest(params: dict) -> str:
    return hashlib.sha256(
        json.dumps(params, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()


def test_the_dense_family_keeps_the_sweep_keys_stored_before_families() -> None:
    # A dense sweep's key: the canonical JSON of its parameters, with no family field; the
    # digest is the one stores made before families hold for these parameters.
    before = {**SWEEP, "block_shape": [128, 128], "shapes": [(512, 256)], "m_values": [16]}
    dense = repo.sweep_key(**SWEEP, **DENSE_SWEEP)
    assert dense == _digest(before)
    assert dense == "14a5117f7c5d2c609692778382c5d2f05a70feefdd40979904bc221855870880"
    # Another family's name and shape params enter its key.
    moe = repo.sweep_key(**SWEEP, **MOE_SWEEP)
    assert moe == _digest({**before, "family": "moe", "shape_params": "E=8,top_k=2"})
    assert moe == "8c0278628de43ce3ad75546f015860a9ab28e818013edf517e46ddb61528c2dd"
    # A family with no shape params is told apart from the dense GEMM by its name alone.
    plain = {"family": "toy", "shape_params": "", "family_in_key": True}
    assert repo.sweep_key(**SWEEP, **plain) == _digest(
        {**before, "family": "toy", "shape_params": ""}
    )
    assert repo.sweep_key(**SWEEP, **plain) != dense


def _alembic(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", url)
    return config


ROWS_AT_0004 = [
    "INSERT INTO devices (device_id, device_name, created_at) "
    "VALUES (1, 'NVIDIA_H200', '2026-12-01 00:00:00')",
    "INSERT INTO environments VALUES (1, 1, 'NVIDIA H200', '9.0', '570', '12.8', '2.11.0', "
    "'3.6.0', '0.1.0', 'k')",
    "INSERT INTO sweeps VALUES (1, 'key', 1, 'm', 1, 'grid', 4, 'vllm', 0, '[16]', "
    "'bfloat16', 128, 128, '2026-12-01 00:00:00')",
    "INSERT INTO tasks (task_id, sweep_id, N, K, M, state, attempts) "
    "VALUES (1, 1, 512, 256, 16, 'done', 1)",
    "INSERT INTO trials (trial_id, task_id, environment_id, BLOCK_SIZE_M, BLOCK_SIZE_N, "
    "BLOCK_SIZE_K, GROUP_SIZE_M, num_warps, num_stages, is_default, status, latency_us, "
    "created_at) VALUES (7, 1, 1, 64, 128, 128, 32, 4, 2, 1, 'ok', 12.5, "
    "'2026-12-01 00:00:00')",
]
TRIALS = "SELECT trial_id, task_id, latency_us FROM trials"


def test_a_store_at_0004_upgrades_its_tasks_to_dense_and_downgrades_keeping_trials(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'families.db'}"
    engine = connect(url)
    try:
        upgrade(engine, "0004")
        with engine.begin() as connection:
            for statement in ROWS_AT_0004:
                connection.execute(text(statement))
        upgrade(engine)
        with engine.connect() as connection:
            tasks = connection.execute(text("SELECT task_id, family, shape_params FROM tasks"))
            assert list(tasks) == [(1, "dense", "")]
            assert list(connection.execute(text(TRIALS))) == [(7, 1, 12.5)]
        with session_scope(engine) as session:
            (winner,) = repo.winners(session, device_name="NVIDIA_H200")
        assert (winner.family, winner.N, winner.latency_us) == ("dense", 512, 12.5)
        # Later revisions first, so that only 0005's downgrade runs (and refuses) below.
        command.downgrade(_alembic(url), "0005")
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO tasks (task_id, sweep_id, family, shape_params, "
                    "N, K, M, state, attempts) VALUES (2, 1, 'moe', 'E=8', 512, "
                    "256, 32, 'pending', 0)"
                )
            )
        with pytest.raises(RuntimeError, match=r"1 task\(s\) of another kernel family"):
            command.downgrade(_alembic(url), "0004")
        with engine.begin() as connection:
            connection.execute(text("DELETE FROM tasks WHERE task_id = 2"))
        command.downgrade(_alembic(url), "0001")  # through 0005 and 0002: columns dropped
        with engine.connect() as connection:
            assert list(connection.execute(text(TRIALS))) == [(7, 1, 12.5)]
            columns = [row[1] for row in connection.execute(text("PRAGMA table_info(tasks)"))]
        assert "family" not in columns and "in_flight_config" not in columns
    finally:
        engine.dispose()


IMPORT_AT_0009 = (
    "INSERT INTO imports (import_id, device_id, N, K, block_n, block_k, label, "
    "file_name, sha256, configs, created_at, cannot_launch) VALUES (1, 1, 512, "
    "256, 128, 128, 'vllm', 'f.json', 'ab', '{}', '2026-12-01 00:00:00', '{}')"
)


def test_a_store_at_0009_upgrades_its_imports_to_dense_and_downgrades(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'imports.db'}"
    engine = connect(url)
    try:
        upgrade(engine, "0009")
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO devices (device_id, device_name, created_at) "
                    "VALUES (1, 'NVIDIA_H200', '2026-12-01 00:00:00')"
                )
            )
            connection.execute(text(IMPORT_AT_0009))
        upgrade(engine)
        with session_scope(engine) as session:
            (stored,) = repo.list_imports(session)
            assert (stored.family, stored.N, stored.label) == ("dense", 512, "vllm")
            toy = repo.record_import(
                session,
                device_name="NVIDIA_H200",
                N=64,
                K=32,
                block_shape=(128, 128),
                label="toy",
                file_name="t.json",
                sha256="cd",
                configs={1: DEFAULT},
                family="toy",
                shape_params="",
            )
        assert toy.family == "toy"
        with pytest.raises(RuntimeError, match=r"1 import\(s\) of another kernel family"):
            command.downgrade(_alembic(url), "0009")
        with engine.begin() as connection:
            connection.execute(text("DELETE FROM imports WHERE label = 'toy'"))
        command.downgrade(_alembic(url), "0009")
        with engine.connect() as connection:
            columns = [row[1] for row in connection.execute(text("PRAGMA table_info(imports)"))]
            assert list(connection.scalars(text("SELECT label FROM imports"))) == ["vllm"]
        assert "family" not in columns and "cannot_launch" in columns
    finally:
        engine.dispose()


IMPORT_AT_0010 = (
    "INSERT INTO imports (import_id, device_id, N, K, block_n, block_k, label, file_name, "
    "sha256, configs, created_at, cannot_launch, family) VALUES (1, 1, 512, 256, 128, 128, "
    "'vllm', 'f.json', 'ab', '{\"1\": {}}', '2026-12-01 00:00:00', '{}', 'dense')"
)


def test_a_store_at_0010_upgrades_its_imports_to_no_shape_params_and_downgrades(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'imports.db'}"
    engine = connect(url)
    try:
        upgrade(engine, "0010")
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO devices (device_id, device_name, created_at) "
                    "VALUES (1, 'NVIDIA_H200', '2026-12-01 00:00:00')"
                )
            )
            connection.execute(text(IMPORT_AT_0010))
        upgrade(engine)
        with engine.connect() as connection:
            rows = connection.execute(text("SELECT import_id, family, shape_params FROM imports"))
            assert list(rows) == [(1, "dense", "")]
        with session_scope(engine) as session:
            # One (N, K, block_shape, label) of another family and E: a second import.
            moe = repo.record_import(
                session,
                device_name="NVIDIA_H200",
                N=512,
                K=256,
                block_shape=(128, 128),
                label="vllm",
                file_name="e.json",
                sha256="cd",
                configs={1: DEFAULT},
                family="moe",
                shape_params="E=8",
            )
            listed = [(i.import_id, i.family, i.shape_params) for i in repo.list_imports(session)]
        assert (moe.import_id, moe.shape_params) == (2, "E=8")
        assert listed == [(1, "dense", ""), (2, "moe", "E=8")]
        with pytest.raises(RuntimeError, match=r"1 import\(s\) with shape params and 1 key"):
            command.downgrade(_alembic(url), "0010")
        with engine.begin() as connection:
            connection.execute(text("DELETE FROM imports WHERE import_id = 2"))
        command.downgrade(_alembic(url), "0010")
        with engine.connect() as connection:
            columns = [row[1] for row in connection.execute(text("PRAGMA table_info(imports)"))]
            rows = connection.execute(text("SELECT import_id, family, label FROM imports"))
            assert list(rows) == [(1, "dense", "vllm")]
        assert "shape_params" not in columns and "family" in columns
    finally:
        engine.dispose()
