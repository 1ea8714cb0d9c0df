"""`tuner import`'s launch check: entries compiled for the device's architecture (from its
trials, else the table of known GPUs), those that cannot launch left out of merges with the
reason in the command's output, the store, the export notes and the report."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from api.app import create_app
from api.settings import Settings
from tests.storefill import DEFAULT, FAST, fill
from tuner.cli.app import app
from tuner.files.format import dump_config_file
from tuner.kernels.dense.family import config_file_name
from tuner.measure.launch_check import KNOWN_GPUS, device_arch, gpu_model

runner = CliRunner()
# Tuned on sm90: 128x256x128 tiles, 4 stages, about 145 KiB of shared memory (too much on sm89).
HOPPER = {
    "BLOCK_SIZE_M": 128,
    "BLOCK_SIZE_N": 256,
    "BLOCK_SIZE_K": 128,
    "GROUP_SIZE_M": 1,
    "num_warps": 8,
    "num_stages": 4,
}
NAME = config_file_name(576, 7168, "NVIDIA_L20")
REASON = (
    "config 128x256x128 g1 w8 s4 needs 148480 bytes of shared memory; NVIDIA_L20 (sm89) "
    "has 101376 per block"
)
PLAN = {
    (576, 7168, 1): [(DEFAULT, True, "ok", 10.0), (FAST, False, "ok", 6.0)],
    (576, 7168, 16): [(DEFAULT, True, "ok", 10.0)],
}


@pytest.fixture(autouse=True)
def _compile_cache(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One compile cache for this module's tests (each distinct config compiles once)."""
    monkeypatch.setenv("TUNER_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "launch-cache"))


def invoke(*args: str):
    return runner.invoke(app, list(args))


def stored(db: str):
    from db import repo
    from db.connection import open_store, session_scope

    engine = open_store(db)
    try:
        with session_scope(engine) as session:
            return [
                (i.device_name, i.checked_arch, i.cannot_launch) for i in repo.list_imports(session)
            ]
    finally:
        engine.dispose()


def test_gpu_models_and_architectures() -> None:
    assert [
        gpu_model(n)
        for n in (
            "NVIDIA_H100_80GB_HBM3",
            "NVIDIA_A100-SXM4-80GB",
            "NVIDIA_GeForce_RTX_4090",
            "NVIDIA_L40S",
            "AMD_Instinct_MI300X",
        )
    ] == ["H100", "A100", "RTX_4090", "L40S", "AMD"]
    assert device_arch("NVIDIA_L20", []).arch == 89
    assert device_arch("NVIDIA_L20", []).shared_bytes == 101376
    assert (device_arch("NVIDIA_H20", []).arch, device_arch("NVIDIA_H20", []).shared_bytes) == (
        90,
        232448,
    )
    assert device_arch("NVIDIA_A100-SXM4-80GB", []).shared_bytes == 166912
    # The store's trials win over the table; the interpreter's "" says nothing.
    found = device_arch("NVIDIA_L20", ["", "9.0"])
    assert (found.arch, found.source) == (
        90,
        "from its trials in the store, compute capability 9.0",
    )
    assert device_arch("NVIDIA_Foo", [""]) is None
    assert device_arch("AMD_Instinct_MI300X", []) is None


def test_an_sm90_entry_is_left_out_on_an_l20_everywhere(tmp_path: Path) -> None:
    # One import, one compile pool: an L20 with trials (sm89 from them), an H20 without (sm90
    # from the table of known GPUs) and a GPU neither knows (imported unchecked).
    db = f"sqlite:///{tmp_path / 'tuner.db'}"
    fill(db, PLAN, m_values=(1, 16))  # trials on compute capability 8.9
    path = tmp_path / NAME
    path.write_text(dump_config_file({1: FAST, 2048: HOPPER}))
    h20, foo = (tmp_path / config_file_name(576, 7168, d) for d in ("NVIDIA_H20", "NVIDIA_Foo"))
    for other in (h20, foo):
        other.write_text(dump_config_file({2048: HOPPER}))
    args = ["import", str(path), str(h20), str(foo), "--db", db, "--no-publish"]
    result = invoke(*args, "--label", "vllm-h100")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().splitlines()[3:] == [
        f"left out {NAME} M=2048: {REASON}; vLLM would fail with OutOfResources there",
        "checked the entries for NVIDIA_L20 on sm89 (from its trials in the store, compute "
        "capability 8.9; 101376 bytes of shared memory per block): 2 distinct config(s) "
        "compiled, 1 entry left out",
        "checked the entries for NVIDIA_H20 on sm90 (from the table of known GPUs, H20; 232448 "
        "bytes of shared memory per block): 1 distinct config(s) compiled, 0 entries left out",
        "not checked: NVIDIA_Foo has no trials in the store and is not a known GPU "
        f"({', '.join(KNOWN_GPUS)}); its entries were imported unchecked",
    ]
    assert sorted(stored(db)) == [
        ("NVIDIA_Foo", None, {}),
        ("NVIDIA_H20", 90, {}),
        ("NVIDIA_L20", 89, {2048: REASON}),
    ]
    unchecked = invoke("import", str(foo), "--label", "again", "--no-check", "--db", db)
    assert unchecked.stdout.strip().splitlines()[1] == (
        "not checked: --no-check; the entries were imported without compiling them for their device"
    )
    out = tmp_path / "out"
    exported = invoke("export", "--device", "L20", "--out", str(out), "--db", db)
    assert exported.exit_code == 0, exported.output
    assert (out / NAME).read_text() == dump_config_file({1: FAST, 16: DEFAULT})
    note = (
        f"M=2048: entry imported from 'vllm-h100' left out, it cannot launch on this "
        f"device: {REASON}"
    )
    assert note in " ".join(exported.stdout.split())
    with TestClient(create_app(Settings(db_url=db))) as client:
        files = client.get("/devices/L20/preview/configs").json()["files"]
        page = client.get("/devices/L20/report").text
        listed = client.get("/devices/L20/imports").json()
    assert note in files[0]["notes"]
    assert (
        f"M=2048: entry imported from &#x27;vllm-h100&#x27; left out, it cannot launch on "
        f"this device: {REASON}."
    ) in page
    assert "left out: imported from &#x27;vllm-h100&#x27;, cannot launch here" in page
    assert (listed[0]["checked_arch"], listed[0]["cannot_launch"]) == (89, {"2048": REASON})
    assert [i["device_name"] for i in listed] == ["NVIDIA_L20"]


def test_an_moe_file_is_imported_unchecked_with_the_dimension_its_name_lacks(
    tmp_path: Path,
) -> None:
    # A fused-MoE name gives E and N; the kernel compiles for K and top_k too.
    name = "E=4,N=64,device_name=NVIDIA_L20,dtype=fp8_w8a8,block_shape=[128,128].json"
    (tmp_path / name).write_text(dump_config_file({1: FAST}))
    db = f"sqlite:///{tmp_path / 'tuner.db'}"
    result = invoke("import", str(tmp_path / name), "--db", db, "--no-publish")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().splitlines()[1:] == [
        f"not checked {name}: compiling failed: the file's name does not give top_k, which "
        "the moe kernel is compiled for",
        "checked the entries for NVIDIA_L20 on sm89 (from the table of known GPUs, L20; "
        "101376 bytes of shared memory per block): 0 distinct config(s) compiled, 0 entries "
        "left out",
    ]
    assert stored(db) == [("NVIDIA_L20", None, {})]
