"""Files for the engine release the user serves with: `tuner mounts --engine-version` and
`--triton-version` put files in the folders that release reads, and `tuner export --engine
sglang` names the entries SGLang rewrites as it reads them."""

from __future__ import annotations

from pathlib import Path

from tests.cli.test_cli_serving import GOOD, PLAN, invoke, one_line_error
from tests.storefill import FAST, fill
from tuner.files.format import dump_config_file
from tuner.kernels.dense.family import config_file_name, engine_file_name


def test_mounts_follow_the_engine_and_triton_versions(tmp_path: Path) -> None:
    # The folders by release and the refusals of bad versions: tests/tuner/files/test_mounts.py.
    name = config_file_name(576, 7168, "NVIDIA_L20")
    moe = "E=128,N=384,device_name=NVIDIA_L20,dtype=fp8_w8a8,block_shape=[128,128].json"
    folder = tmp_path / "cfg"
    folder.mkdir()
    (folder / name).write_text(GOOD)
    (folder / moe).write_text(dump_config_file({1: FAST}, triton_version="3.6.0"))
    args = ["mounts", "--device", "L20", "--files", str(folder), "--engine", "sglang"]
    args += ["--site-packages", "/opt/py", "--engine-version", "0.5.15", "--triton-version"]
    one_line_error(
        invoke(*args, "3.8.0"),
        f'{folder / moe}: its "triton_version" key makes SGLang\'s get_moe_configs '
        "fail (it reads every key as an M); write the files with `tuner export "
        "--engine sglang`",
    )
    (folder / moe).write_text(dump_config_file({1: FAST}))  # as export --engine sglang writes
    with_moe = invoke(*args, "3.8.0")
    assert with_moe.exit_code == 0, with_moe.output
    moe_dir = "/opt/py/sglang/srt/layers/moe/moe_runner/triton_utils/configs/triton_3_8_0"
    assert [line for line in with_moe.stdout.splitlines() if line.startswith("  -v")] == [
        f'  -v "{folder.resolve()}/{moe}:{moe_dir}/{moe.replace(",128]", ", 128]")}:ro" \\',
        f'  -v "{folder.resolve()}/{name}:/opt/py/sglang/srt/layers/quantization/configs/'
        f'{engine_file_name(name, "sglang")}:ro" \\',
    ]
    assert "(--triton-version;" in with_moe.stdout


def test_export_for_sglang_flags_entries_it_rewrites_on_read(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'tuner.db'}"
    fill(db, PLAN, m_values=(1, 16))
    shipped = tmp_path / config_file_name(576, 7168, "AMD_Instinct_MI300X")
    shipped.write_text(dump_config_file({1: {**FAST, "BLOCK_SIZE_K": 64}, 16: FAST}))
    assert invoke("import", str(shipped), "--db", db, "--no-check", "--no-publish").exit_code == 0
    export = f"export --device AMD_Instinct_MI300X --out {tmp_path / 'out'} --db {db}".split()
    result = invoke(*export, "--engine", "sglang")
    assert result.exit_code == 0, result.output
    name = engine_file_name(shipped.name, "sglang")
    assert [line for line in result.stderr.splitlines() if line.startswith("warning:")] == [
        f"warning: SGLang 0.5.23 rewrites {name} as it reads it: BLOCK_SIZE_K raised to 128 at "
        "M=1 (BLOCK_SIZE_K 64); it runs those entries, not the file's"
    ]
    older = invoke(*export, "--engine", "sglang", "--engine-version", "0.5.11")
    assert older.exit_code == 0 and "warning:" not in older.stderr
    vllm = invoke(*export)
    assert vllm.exit_code == 0 and "rewrites" not in vllm.stderr


def test_an_h200_nvl_mounts_vllms_moe_files_named_for_every_h200(tmp_path: Path) -> None:
    # vLLM 0.33.0 reads an H200 NVL's MoE files under NVIDIA_H200 (get_config_file_name)
    folder = tmp_path / "cfg"
    folder.mkdir()
    moe = "E=8,N=64,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json"
    (folder / moe).write_text(dump_config_file({1: FAST}))
    for device in ("NVIDIA_H200_NVL", "H200 NVL", "H200"):
        done = invoke("mounts", "--device", device, "--files", str(folder))
        assert done.exit_code == 0, done.output
        assert f'  -v "{folder.resolve()}:/opt/blockfp8-tuner/moe-configs:ro" \\' in (
            done.stdout.splitlines()
        ), done.stdout
    one_line_error(
        invoke("mounts", "--device", "L20", "--files", str(folder)),
        f"{folder}: no config files for --device L20; devices there: NVIDIA_H200",
    )
