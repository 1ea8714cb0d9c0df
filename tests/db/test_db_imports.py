"""Imports and overviews of the store: upsert per label, latest import wins per M, counts."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Engine, inspect, text

from db import repo
from db.connection import connect, open_store, session_scope, upgrade
from tests.storefill import DEFAULT, FAST, SLOW, TRITON, fill

AMD = {
    "BLOCK_SIZE_K": 128,
    "BLOCK_SIZE_M": 32,
    "BLOCK_SIZE_N": 32,
    "GROUP_SIZE_M": 1,
    "kpack": 1,
    "matrix_instr_nonkdim": 16,
    "num_warps": 4,
}


def record(session, label: str, configs: dict, device_name: str = "NVIDIA_L20"):
    return repo.record_import(
        session,
        device_name=device_name,
        N=576,
        K=7168,
        block_shape=(128, 128),
        label=label,
        file_name="f.json",
        sha256=label * 2,
        configs=configs,
        family="dense",
        shape_params="",
    )


def test_record_list_and_replace(engine: Engine) -> None:
    with session_scope(engine) as session:
        first = record(session, "vllm", {4: FAST, 8: AMD})
    assert (first.device_name, first.m_keys, first.configs[8]) == ("NVIDIA_L20", (4, 8), AMD)
    assert list(first.configs[8]) == list(AMD)  # AMD keys kept, in the file's order
    with session_scope(engine) as session:
        again = record(session, "vllm", {2048: SLOW})
    assert again.import_id == first.import_id and again.m_keys == (2048,)
    with session_scope(engine) as session:
        record(session, "mine", {4: SLOW, 16: DEFAULT})
        listed = repo.list_imports(session, device_name="NVIDIA_L20")
        merged = repo.imported_configs(session, device_name="NVIDIA_L20")
        assert repo.known_device_names(session) == ["NVIDIA_L20"]
        assert repo.list_device_names(session) == []  # imports are not sweeps
    assert [(i.label, i.m_keys) for i in listed] == [("mine", (4, 16)), ("vllm", (2048,))]
    assert list(merged) == [("dense", "", 576, 7168, (128, 128))]
    shape = merged[("dense", "", 576, 7168, (128, 128))]
    assert shape.configs == {2048: SLOW, 4: SLOW, 16: DEFAULT}
    assert shape.labels == {2048: "vllm", 4: "mine", 16: "mine"}


def test_one_shape_and_label_of_two_families_or_two_e_are_three_imports(engine: Engine) -> None:
    def record(family: str, shape_params: str, configs: dict) -> repo.ImportInfo:
        return repo.record_import(
            session,
            device_name="NVIDIA_L20",
            N=576,
            K=7168,
            block_shape=(128, 128),
            label="vllm",
            file_name=f"{family}.json",
            sha256="ab",
            configs=configs,
            family=family,
            shape_params=shape_params,
        )

    with session_scope(engine) as session:
        dense = record("dense", "", {1: FAST})
        moe = record("moe", "E=8", {1: SLOW})
        other = record("moe", "E=16", {16: DEFAULT})
        again = record("moe", "E=8", {2: SLOW})  # the same key: replaces, one row
        listed = repo.list_imports(session)
        imported = repo.imported_configs(session, device_name="NVIDIA_L20")
    assert len({dense.import_id, moe.import_id, other.import_id}) == 3
    assert again.import_id == moe.import_id
    assert [(i.family, i.shape_params, i.configs) for i in listed] == [
        ("dense", "", {1: FAST}),
        ("moe", "E=16", {16: DEFAULT}),
        ("moe", "E=8", {2: SLOW}),
    ]
    assert {key: shape.configs for key, shape in imported.items()} == {
        ("dense", "", 576, 7168, (128, 128)): {1: FAST},
        ("moe", "E=16", 576, 7168, (128, 128)): {16: DEFAULT},
        ("moe", "E=8", 576, 7168, (128, 128)): {2: SLOW},
    }


def test_record_refuses(engine: Engine) -> None:
    with session_scope(engine) as session, pytest.raises(ValueError, match="label must be"):
        record(session, "", {1: FAST})
    with session_scope(engine) as session, pytest.raises(ValueError, match="no M entries"):
        record(session, "x", {})
    with session_scope(engine) as session, pytest.raises(ValueError, match="vLLM's key"):
        record(session, "x", {1: FAST}, device_name="NVIDIA L20")


def test_overviews_and_counts(store_url: str) -> None:
    plan = {
        (576, 7168, 1): [
            (DEFAULT, True, "ok", 10.0),
            (FAST, False, "ok", 5.0),
            (SLOW, False, "wrong_result", None),
        ]
    }
    sweep_id = fill(store_url, plan, m_values=(1, 16))
    engine = open_store(store_url)
    try:
        with session_scope(engine) as session:
            (summary,) = repo.list_sweeps(session)
            tasks = repo.sweep_tasks(session, sweep_id=sweep_id)
            envs = repo.device_environments(session, device_name="NVIDIA_L20")
            counts = repo.store_counts(session)
            with pytest.raises(LookupError, match="no sweep with sweep_id 99"):
                repo.sweep_tasks(session, sweep_id=99)
    finally:
        engine.dispose()
    assert (
        summary.sweep_id,
        summary.model,
        summary.tasks,
        summary.trials_ok,
        summary.trials_total,
    ) == (sweep_id, "test-model", {"pending": 1, "running": 0, "done": 1, "failed": 0}, 2, 3)
    assert [
        (t.M, t.state, t.trials_ok, t.trials_total, t.best_latency_us, t.default_latency_us)
        for t in tasks
    ] == [(1, "done", 2, 3, 5.0, 10.0), (16, "pending", 0, 0, None, None)]
    assert [(e.gpu_name, e.torch, e.triton, e.trials) for e in envs] == [
        ("NVIDIA L20", "2.11.0", TRITON, 3)
    ]
    assert counts.trials["ok"] == 2 and counts.trials["wrong_result"] == 1
    assert counts.trials["crashed"] == 0
    assert counts.tasks == {"pending": 1, "running": 0, "done": 1, "failed": 0}
    assert (counts.sweeps, counts.imports) == (1, 0)


def test_upgrade_from_0002_adds_imports_and_keeps_rows(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = connect(url)
    upgrade(engine, "0002")
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO devices (device_name, created_at) "
                "VALUES ('NVIDIA_L20', '2026-11-30 00:00:00')"
            )
        )
    assert "imports" not in inspect(engine).get_table_names()
    upgrade(engine)
    assert "imports" in inspect(engine).get_table_names()
    engine.dispose()
    engine = open_store(url)
    with session_scope(engine) as session:
        item = record(session, "vllm", {1: FAST})
    assert item.device_name == "NVIDIA_L20"
    engine.dispose()


def test_entries_that_cannot_launch_are_stored_and_left_out_of_merges(engine: Engine) -> None:
    reason = "config 128x256x128 g64 w8 s5 needs 200000 bytes of shared memory"
    with session_scope(engine) as session:
        older = repo.record_import(
            session,
            device_name="NVIDIA_L20",
            N=576,
            K=7168,
            block_shape=(128, 128),
            label="old",
            file_name="f.json",
            sha256="a",
            configs={16: FAST},
            family="dense",
            shape_params="",
        )
        item = repo.record_import(
            session,
            device_name="NVIDIA_L20",
            N=576,
            K=7168,
            block_shape=(128, 128),
            label="h100",
            file_name="f.json",
            sha256="b",
            configs={1: FAST, 16: SLOW, 64: SLOW},
            checked_arch=89,
            cannot_launch={16: reason, 64: reason},
            family="dense",
            shape_params="",
        )
        shape = repo.imported_configs(session, device_name="NVIDIA_L20")[
            ("dense", "", 576, 7168, (128, 128))
        ]
    assert (older.checked_arch, older.cannot_launch) == (None, {})
    assert (item.checked_arch, item.cannot_launch, item.m_keys) == (
        89,
        {16: reason, 64: reason},
        (1, 16, 64),
    )
    # M=16 falls back on the older import's entry; M=64 has none.
    assert (shape.configs, shape.labels) == ({16: FAST, 1: FAST}, {16: "old", 1: "h100"})
    assert shape.left_out == {16: ("h100", reason), 64: ("h100", reason)}
    record_checked = dict(
        family="dense",
        shape_params="",
        device_name="NVIDIA_L20",
        N=576,
        K=7168,
        block_shape=(128, 128),
        label="x",
        file_name="f.json",
        sha256="c",
        configs={1: FAST},
    )
    with session_scope(engine) as session, pytest.raises(ValueError, match="needs the checked"):
        repo.record_import(session, **record_checked, cannot_launch={1: reason})
    with session_scope(engine) as session, pytest.raises(ValueError, match="not in the file: 2"):
        repo.record_import(session, **record_checked, checked_arch=89, cannot_launch={2: reason})


def test_upgrade_from_0006_keeps_imports_unchecked(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = connect(url)
    upgrade(engine, "0006")
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO devices (device_id, device_name, created_at) "
                "VALUES (1, 'NVIDIA_L20', '2026-11-30 00:00:00')"
            )
        )
        connection.execute(
            text(
                "INSERT INTO imports (device_id, N, K, block_n, block_k, label, file_name, sha256, "
                "configs, created_at) VALUES (1, 576, 7168, 128, 128, 'vllm', 'f.json', 'ab', "
                "'{\"1\": {\"BLOCK_SIZE_M\": 16}}', '2026-11-30 00:00:00')"
            )
        )
    upgrade(engine)
    engine.dispose()
    engine = open_store(url)
    with session_scope(engine) as session:
        (item,) = repo.list_imports(session)
    engine.dispose()
    assert (item.label, item.checked_arch, item.cannot_launch) == ("vllm", None, {})


def test_the_known_devices_are_those_with_a_sweep_or_an_import(engine: Engine) -> None:
    from tests.storefill import DENSE_SWEEP

    sweep = {
        "model": "m",
        "tp": 1,
        "strategy": "grid",
        "budget": 1,
        "space": "vllm",
        "seed": 0,
        "m_values": [1],
        "out_dtype": "bfloat16",
        "block_shape": (128, 128),
        "shapes": [(256, 384)],
        **DENSE_SWEEP,
    }
    with session_scope(engine) as session:
        repo.create_sweep(session, device_name="NVIDIA_H200", **sweep)
        record(session, "vllm", {1: FAST}, device_name="NVIDIA_L20")
        record(session, "vllm", {1: FAST}, device_name="NVIDIA_H200")
        repo.get_or_create_device(session, device_name="NVIDIA_B200")  # neither
        assert repo.known_device_names(session) == ["NVIDIA_H200", "NVIDIA_L20"]
