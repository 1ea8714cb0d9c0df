"""Field inputs end to end: a device whose vLLM key holds '(' and ')'
is swept, exported, served over HTTP and imported; AMD files keep waves_per_eu (0 too) with or
without num_stages."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

from fastapi.testclient import TestClient
from typer.testing import CliRunner

from api.app import create_app
from api.settings import Settings
from tests.storefill import DEFAULT, FAST, SLOW, fill, row_counts
from tuner.cli.app import app
from tuner.files.format import dump_config_file
from tuner.kernels.dense.family import config_file_name

runner = CliRunner()
INTEL = "Intel(R)_Data_Center_GPU_Max_1550"
PLAN = {
    (576, 7168, 1): [(DEFAULT, True, "ok", 10.0), (FAST, False, "ok", 6.0)],
    (576, 7168, 16): [(DEFAULT, True, "ok", 10.0), (SLOW, False, "ok", 12.0)],
}


def invoke(*args: str):
    return runner.invoke(app, list(args))


def test_a_device_with_parentheses_exports_and_serves(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'tuner.db'}"
    fill(db, PLAN, device_name=INTEL, m_values=(1, 16))
    out = tmp_path / "out"
    # The GPU's own name, as a user would type it, names the device.
    result = invoke(
        "export", "--device", "Intel(R) Data Center GPU Max 1550", "--out", str(out), "--db", db
    )
    assert result.exit_code == 0, result.output
    name = config_file_name(576, 7168, INTEL)
    assert [p.name for p in out.iterdir()] == [name]
    exported = (out / name).read_bytes()
    assert json.loads(exported) == {"1": FAST, "16": DEFAULT}
    published = invoke("publish", "--device", "Intel(R) Data Center GPU Max 1550", "--db", db)
    assert published.exit_code == 0, published.output
    with TestClient(create_app(Settings(db_url=db))) as client:
        listed = client.get(f"/devices/{quote(INTEL)}/configs")
        assert listed.status_code == 200, listed.text
        assert [f["file_name"] for f in listed.json()["files"]] == [name]
        one = client.get(f"/devices/{quote(INTEL)}/configs/{quote(name)}")
        assert one.status_code == 200, one.text
        assert one.content == exported
        assert (
            client.get(f"/devices/{quote('Intel(R) Data Center GPU Max 1550')}/configs").status_code
            == 200
        )


def test_import_a_file_named_for_an_intel_gpu(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'tuner.db'}"
    path = tmp_path / config_file_name(576, 7168, INTEL)
    path.write_text(dump_config_file({1: FAST, 4096: SLOW}))
    result = invoke("import", str(path), "--label", "intel", "--db", db)
    assert result.exit_code == 0, result.output
    assert f"for {INTEL} as 'intel'" in result.stdout
    assert row_counts(db)["imports"] == 1


def _amd(entry: dict) -> dict:
    """The entry without num_stages."""
    return {key: value for key, value in entry.items() if key != "num_stages"}


def test_amd_keys_are_kept_with_or_without_num_stages(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'tuner.db'}"
    # vLLM's MI300X files: kpack and matrix_instr_nonkdim, no num_stages; SGLang's MI325X and
    # vLLM's AMD_Radeon_Graphics files: num_stages and waves_per_eu 0 (tuner.files.format).
    mi300x = {**_amd(FAST), "kpack": 2, "matrix_instr_nonkdim": 16}
    mi325x = {**FAST, "waves_per_eu": 0, "matrix_instr_nonkdim": 16, "kpack": 2}
    files = {"AMD_Instinct_MI300X": {1: mi300x}, "AMD_Instinct_MI325X": {1: mi325x, 64: mi325x}}
    paths = []
    for device, configs in files.items():
        path = tmp_path / config_file_name(576, 7168, device)
        path.write_text(json.dumps({str(m): c for m, c in configs.items()}))
        paths.append(str(path))
    result = invoke("import", *paths, "--db", db)
    assert result.exit_code == 0, result.output
    from db import repo
    from db.connection import open_store, session_scope

    engine = open_store(db)
    with session_scope(engine) as session:
        stored = {item.device_name: item.configs for item in repo.list_imports(session)}
    engine.dispose()
    assert stored == {
        "AMD_Instinct_MI300X": {1: mi300x},
        "AMD_Instinct_MI325X": {1: mi325x, 64: mi325x},
    }
    assert list(stored["AMD_Instinct_MI325X"][1]) == list(mi325x)  # the file's key order


def test_a_sweep_planned_for_an_intel_gpu_keeps_its_name(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'tuner.db'}"
    result = invoke(
        "sweep",
        "--device",
        "Intel(R) Data Center GPU Max 1550",
        "--model",
        "tiny",
        "--m",
        "1",
        "--no-run",
        "--db",
        db,
    )
    assert result.exit_code == 0, result.output
    assert f"sweep 1 (new): {INTEL}, tiny TP 1, 2 shapes x 1 M" in result.stdout
