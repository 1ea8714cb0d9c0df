"""`tuner import` on the files vLLM 0.33.0 ships, read from its wheel: the L20's 14 dense files
with their M coverage, and an AMD file whose extra keys are kept."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from db import repo
from db.connection import open_store, session_scope
from tests.engines.engine_code import wheel_folder
from tests.engines.vllm_host import DENSE_CONFIGS
from tests.storefill import row_counts
from tuner.cli.app import app
from tuner.kernels.dense.family import DENSE, config_file_name


def shipped(wheel: Path, device_name: str, folder: Path) -> list[Path]:
    """The wheel's dense files of one device, written to `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, data in wheel_folder(wheel, DENSE_CONFIGS).items():
        if DENSE.files.parse_file_name(name)[1] == device_name:
            (folder / name).write_bytes(data)
            paths.append(folder / name)
    return paths


def test_import_of_vllms_l20_files_reports_their_coverage(vllm_wheel, tmp_path) -> None:
    files = shipped(vllm_wheel, "NVIDIA_L20", tmp_path / "l20")
    db = f"sqlite:///{tmp_path / 'tuner.db'}"
    result = CliRunner().invoke(
        app, ["import", *map(str, files), "--label", "vllm-0.33.0", "--db", db, "--no-check"]
    )
    assert result.exit_code == 0, result.output
    *lines, unchecked, last = result.stdout.strip().splitlines()
    assert unchecked == "not checked: --no-check"
    assert len(lines) == len(files) == 14
    # imported-only devices are published like any other
    assert last.startswith("published NVIDIA_L20 release 1: 14 file(s), content ")
    coverage = {line.split()[1]: line.split(": ", 1)[1] for line in lines}
    three = (
        "3 of vLLM's 18 M values: 2048, 3072, 4096; missing 1, 2, 4, 8, 16, 24, 32, 48, 64, "
        "96, 128, 256, 512, 1024, 1536; M=1 runs the M=2048 entry"
    )
    assert coverage.pop(config_file_name(576, 7168, "NVIDIA_L20")) == (
        "2 of vLLM's 18 M values: 4, 8; missing 1, 2, 16, 24, 32, 48, 64, 96, 128, 256, 512, "
        "1024, 1536, 2048, 3072, 4096; M=1 runs the M=4 entry; M=4096 runs the M=8 entry"
    )
    assert list(coverage.values()) == [three] * 13
    assert all(" for NVIDIA_L20 as 'vllm-0.33.0'" in line for line in lines)
    assert row_counts(db)["imports"] == 14


def test_an_amd_file_is_imported_with_its_keys(vllm_wheel, tmp_path) -> None:
    name = config_file_name(1536, 7168, "AMD_Instinct_MI300X")
    (amd,) = (
        path
        for path in shipped(vllm_wheel, "AMD_Instinct_MI300X", tmp_path / "amd")
        if path.name == name
    )
    db = f"sqlite:///{tmp_path / 'tuner.db'}"
    result = CliRunner().invoke(app, ["import", str(amd), "--db", db])
    assert result.exit_code == 0, result.output
    engine = open_store(db)
    with session_scope(engine) as session:
        (item,) = repo.list_imports(session)
    engine.dispose()
    assert item.device_name == "AMD_Instinct_MI300X"
    assert item.configs[1] == json.loads(amd.read_text())["1"]
    assert "kpack" in item.configs[1] and "num_stages" not in item.configs[1]
