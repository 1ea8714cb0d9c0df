"""Files the store keeps: imports (an upsert per device, shape and label; the latest import's
entry per M that can launch), and releases (publishers racing make one release between them)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import Engine

import tuner.files.release as release_module
from db import repo
from db.connection import session_scope
from tests.db.conftest import sweep
from tests.storefill import DEFAULT, FAST, SLOW, fill
from tuner.files.provenance import family_hashes

AMD = {"BLOCK_SIZE_K": 128, "BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 32, "GROUP_SIZE_M": 1}
AMD |= {"kpack": 1, "matrix_instr_nonkdim": 16, "num_warps": 4}
SHAPE = ("dense", "", 576, 7168, (128, 128))


def record(session, label: str, configs: dict, **given) -> repo.ImportInfo:
    fields = {"device_name": "NVIDIA_L20", "N": 576, "K": 7168, "block_shape": (128, 128)}
    fields |= {"file_name": "f.json", "sha256": label * 2, "family": "dense", "shape_params": ""}
    return repo.record_import(session, **{**fields, **given}, label=label, configs=configs)


def test_an_import_is_replaced_by_its_label_and_the_latest_import_wins_per_m(engine: Engine):
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
        assert repo.known_device_names(session, swept=True) == []  # imports are not sweeps
        sweep(session, device_name="NVIDIA_H200")
        record(session, "vllm", {1: FAST}, device_name="NVIDIA_H200")
        repo.get_or_create_device(session, device_name="NVIDIA_B200")  # neither
        assert repo.known_device_names(session) == ["NVIDIA_H200", "NVIDIA_L20"]
        for label, configs, given, message in [
            ("  ", {1: FAST}, {}, "label must be"),
            ("x", {1: FAST}, {"device_name": "NVIDIA L20"}, "vLLM's key"),
        ]:
            with pytest.raises(ValueError, match=message):
                record(session, label, configs, **given)
    assert [(i.label, i.m_keys) for i in listed] == [("mine", (4, 16)), ("vllm", (2048,))]
    assert list(merged) == [SHAPE]
    assert merged[SHAPE].configs == {2048: SLOW, 4: SLOW, 16: DEFAULT}
    assert merged[SHAPE].labels == {2048: "vllm", 4: "mine", 16: "mine"}


def test_one_shape_and_label_of_two_families_or_two_e_are_three_imports(engine: Engine) -> None:
    with session_scope(engine) as session:
        dense = record(session, "vllm", {1: FAST})
        moe = record(session, "vllm", {1: SLOW}, family="moe", shape_params="E=8")
        other = record(session, "vllm", {16: DEFAULT}, family="moe", shape_params="E=16")
        again = record(session, "vllm", {2: SLOW}, family="moe", shape_params="E=8")  # replaces
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
        SHAPE: {1: FAST},
        ("moe", "E=16", 576, 7168, (128, 128)): {16: DEFAULT},
        ("moe", "E=8", 576, 7168, (128, 128)): {2: SLOW},
    }


def test_entries_that_cannot_launch_are_stored_and_left_out_of_merges(engine: Engine) -> None:
    reason = "config 128x256x128 g64 w8 s5 needs 200000 bytes of shared memory"
    with session_scope(engine) as session:
        older = record(session, "old", {16: FAST})
        rejected = {16: reason, 64: reason}
        item = record(
            session, "h100", {1: FAST, 16: SLOW, 64: SLOW}, checked_arch=89, cannot_launch=rejected
        )
        shape = repo.imported_configs(session, device_name="NVIDIA_L20")[SHAPE]
        assert repo.list_imports(session) == [item, older]
    assert (older.checked_arch, older.cannot_launch) == (None, {})
    assert (item.checked_arch, item.cannot_launch, item.m_keys) == (89, rejected, (1, 16, 64))
    # M=16: the newer import's entry cannot launch: the older one's stands; M=64: none.
    assert (shape.configs, shape.labels) == ({1: FAST, 16: FAST}, {1: "h100", 16: "old"})
    assert shape.left_out == {16: ("h100", reason), 64: ("h100", reason)}


PLAN = {
    (576, 7168, 1): [(DEFAULT, True, "ok", 10.0), (FAST, False, "ok", 6.0)],
    (576, 7168, 16): [(DEFAULT, True, "ok", 10.0), (SLOW, False, "ok", 12.0)],
}
PUBLISHERS = 4


def _race(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, bool]]:
    """PUBLISHERS threads merge the device's files, meet, then all store them at once."""
    barrier = threading.Barrier(PUBLISHERS, timeout=60)
    family_hashes()  # parsed once here: CPython 3.11's ast.parse is not safe in threads
    store = release_module.publish_release

    def meet_then_store(session, **kwargs):
        barrier.wait()  # every thread has merged the same files and read no release yet
        return store(session, **kwargs)

    monkeypatch.setattr(release_module, "publish_release", meet_then_store)

    def one() -> tuple[int, bool]:
        with session_scope(engine) as session:
            done = release_module.publish(session, "NVIDIA_L20", reason="race")
        return done.release.number, done.created

    with ThreadPoolExecutor(PUBLISHERS) as pool:
        return [f.result() for f in [pool.submit(one) for _ in range(PUBLISHERS)]]


def _releases(engine: Engine) -> list[tuple[int, str]]:
    with session_scope(engine) as session:
        releases = repo.list_releases(session, device_name="NVIDIA_L20")
    return [(r.number, r.content_sha256) for r in reversed(releases)]


def test_publishers_racing_make_one_release_then_the_next_for_new_files(
    engine: Engine, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fill(store_url, PLAN, m_values=(1, 16))
    outcomes = _race(engine, monkeypatch)
    assert sorted(outcomes) == [(1, False)] * (PUBLISHERS - 1) + [(1, True)]
    assert [number for number, _ in _releases(engine)] == [1]
    with session_scope(engine) as session:
        first = repo.get_release(session, device_name="NVIDIA_L20")
    assert first is not None
    # Another sweep finds a faster M=16 config: the same race makes release 2, and release 1
    # is unchanged, byte for byte.
    fill(store_url, {(576, 7168, 16): [(FAST, False, "ok", 1.0)]}, m_values=(16,), model="other")
    outcomes = _race(engine, monkeypatch)
    assert sorted(outcomes) == [(2, False)] * (PUBLISHERS - 1) + [(2, True)]
    (_, one), (_, two) = _releases(engine)
    assert one == first.content_sha256 and two != one
    with session_scope(engine) as session:
        assert repo.get_release(session, device_name="NVIDIA_L20", number=1) == first
        latest = repo.get_release(session, device_name="NVIDIA_L20")
        assert latest is not None and latest.number == 2
        for f, new in zip(first.files, latest.files, strict=True):
            assert new.file_name == f.file_name and new.sha256 != f.sha256
            assert repo.blob(session, sha256=f.sha256) is not None
