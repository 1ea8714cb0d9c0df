"""`tuner import` of a folder laid out like vLLM's configs folder: config files imported, the
rest skipped with one line each, and of one file in two spellings the one vLLM reads."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from tests.storefill import FAST, SLOW, row_counts
from tuner.cli.app import app
from tuner.files.format import dump_config_file
from tuner.files.imports import never_read_by_vllm
from tuner.kernels.dense.family import config_file_name, engine_file_name

runner = CliRunner()
VLLM_NAME = config_file_name(576, 7168, "NVIDIA_L20")
SGLANG_NAME = engine_file_name(VLLM_NAME, "sglang")
OTHER_NAME = config_file_name(1536, 7168, "NVIDIA_L20")
INT8_NAME = config_file_name(576, 7168, "NVIDIA_L20", dtype="int8_w8a8")
MOE_NAME = "E=256,N=256,device_name=NVIDIA_L20,dtype=fp8_w8a8,block_shape=[128,128].json"
# A fused-MoE file without block scales (bf16 weights): no registered family reads it.
UNQUANTIZED_MOE_NAME = "E=8,N=14336,device_name=NVIDIA_L20.json"


def invoke(*args: str):
    """`tuner import ... --no-check`: these tests are about which files are read (the launch
    check is tests/cli/test_cli_import_check.py's)."""
    return runner.invoke(app, [*args, "--no-check"])


def stored(db: str) -> list[tuple[str, str, dict]]:
    from db import repo
    from db.connection import open_store, session_scope

    engine = open_store(db)
    try:
        with session_scope(engine) as session:
            return [(i.device_name, i.file_name, i.configs) for i in repo.list_imports(session)]
    finally:
        engine.dispose()


def vllm_folder(root: Path) -> Path:
    """A folder like vLLM's configs folder: one shape in both spellings, another shape, and
    what else such a folder holds."""
    folder = root / "configs"
    (folder / "sub").mkdir(parents=True)
    (folder / VLLM_NAME).write_text(dump_config_file({1: FAST}))
    (folder / SGLANG_NAME).write_text(dump_config_file({1: SLOW}))
    (folder / OTHER_NAME).write_text(dump_config_file({16: SLOW}))
    (folder / INT8_NAME).write_text(dump_config_file({1: FAST}))
    (folder / MOE_NAME).write_text(dump_config_file({1: SLOW, 64: FAST}))
    (folder / UNQUANTIZED_MOE_NAME).write_text(dump_config_file({1: FAST}))
    (folder / "README").write_text("Configs of the block-scaled GEMM.\n")
    (folder / "__init__.py").write_text("")
    return folder


def test_never_read_by_vllm() -> None:
    assert never_read_by_vllm(VLLM_NAME, SGLANG_NAME) == SGLANG_NAME
    assert never_read_by_vllm(SGLANG_NAME, VLLM_NAME) == SGLANG_NAME
    assert never_read_by_vllm(VLLM_NAME, VLLM_NAME) is None
    assert never_read_by_vllm(VLLM_NAME, OTHER_NAME) is None
    assert never_read_by_vllm(SGLANG_NAME, engine_file_name(OTHER_NAME, "sglang")) is None


def test_folder_imports_what_vllm_reads_and_says_what_it_skipped(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'tuner.db'}"
    result = invoke("import", str(vllm_folder(tmp_path)), "--label", "vllm-0.33.0", "--db", db)
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    # The fused-MoE block-FP8 file is imported as its family's (by name: E=... first).
    assert [line.split(":", 1)[0] for line in lines[:3]] == [
        f"imported {MOE_NAME} for NVIDIA_L20 as 'vllm-0.33.0'",
        f"imported {OTHER_NAME} for NVIDIA_L20 as 'vllm-0.33.0'",
        f"imported {VLLM_NAME} for NVIDIA_L20 as 'vllm-0.33.0'",
    ]
    assert lines[-1].startswith("published NVIDIA_L20 release 1: 3 file(s), content ")
    assert lines[3:-1] == [
        "not checked: --no-check; the entries were imported without compiling them for their "
        "device",
        f"skipped {SGLANG_NAME}: vLLM never reads this name (SGLang's spelling); imported "
        f"{VLLM_NAME}, the name vLLM reads",
        f"skipped {UNQUANTIZED_MOE_NAME}: not a block-FP8 GEMM config file name",
        f"skipped {INT8_NAME}: dtype int8_w8a8: only fp8_w8a8 configs are kept",
        "skipped README: not a block-FP8 GEMM config file name",
        "skipped __init__.py: not a block-FP8 GEMM config file name",
        "skipped sub: a folder (folders inside the folder are not read)",
    ]
    # The vLLM spelling's entries are stored (FAST at M=1), not the SGLang file's (SLOW).
    assert stored(db) == [
        ("NVIDIA_L20", MOE_NAME, {1: SLOW, 64: FAST}),
        ("NVIDIA_L20", VLLM_NAME, {1: FAST}),
        ("NVIDIA_L20", OTHER_NAME, {16: SLOW}),
    ]  # by N, K (a fused-MoE name has no K: 0)


def test_the_two_spellings_as_files_keep_the_vllm_one(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'tuner.db'}"
    folder = vllm_folder(tmp_path)
    result = invoke("import", str(folder / SGLANG_NAME), str(folder / VLLM_NAME), "--db", db)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().splitlines()[2] == (
        f"skipped {SGLANG_NAME}: vLLM never reads this name (SGLang's spelling); imported "
        f"{VLLM_NAME}, the name vLLM reads"
    )
    assert stored(db) == [("NVIDIA_L20", VLLM_NAME, {1: FAST})]


def test_a_lone_sglang_spelling_is_imported_as_before(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'tuner.db'}"
    path = tmp_path / SGLANG_NAME
    path.write_text(dump_config_file({1: SLOW}))
    result = invoke("import", str(path), "--db", db)
    assert result.exit_code == 0, result.output
    assert stored(db) == [("NVIDIA_L20", SGLANG_NAME, {1: SLOW})]


def test_a_bad_config_file_in_the_folder_still_stores_nothing(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'tuner.db'}"
    folder = vllm_folder(tmp_path)
    (folder / OTHER_NAME).write_text('{"16": {"BLOCK_SIZE_M": "16"}}')
    result = invoke("import", str(folder), "--db", db)
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines() == [
        f"error: {folder / OTHER_NAME}: M=16: missing key(s) BLOCK_SIZE_N, BLOCK_SIZE_K, "
        "GROUP_SIZE_M, num_warps, num_stages"
    ]
    assert row_counts(db)["imports"] == 0


def test_a_folder_without_config_files_is_one_line(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'tuner.db'}"
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "README").write_text("nothing\n")
    result = invoke("import", str(tmp_path / "empty"), "--db", db)
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'empty'}: no fp8_w8a8 config files in this folder (names like "
        "N=...,K=...,device_name=...,dtype=fp8_w8a8,block_shape=[128,128].json)"
    ]


def test_two_different_files_for_one_shape_are_still_refused(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'tuner.db'}"
    first, second = tmp_path / "a" / VLLM_NAME, tmp_path / "b" / VLLM_NAME
    for path, entry in ((first, FAST), (second, SLOW)):
        path.parent.mkdir()
        path.write_text(dump_config_file({1: entry}))
    result = invoke("import", str(first), str(second), "--db", db)
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        f"error: {second}: same device and shape as {first}; import one per shape and label"
    ]
    assert row_counts(db)["imports"] == 0


def test_import_flags_entries_sglang_rewrites_and_follows_the_files_key_order(
    tmp_path: Path,
) -> None:
    db = f"sqlite:///{tmp_path / 'tuner.db'}"
    amd = engine_file_name(config_file_name(576, 7168, "AMD_Instinct_MI300X"), "sglang")
    # Hand-written, keys descending: vLLM's min() keeps 5120 at the M=4096 tie.
    (tmp_path / amd).write_text(
        json.dumps({"5120": {**FAST, "BLOCK_SIZE_K": 64}, "3072": {**FAST, "BLOCK_SIZE_K": 32}})
    )
    nvidia = tmp_path / SGLANG_NAME  # 64 divides 128: SGLang on CUDA keeps it
    nvidia.write_text(dump_config_file({1: {**FAST, "BLOCK_SIZE_K": 64}}))
    result = invoke("import", str(tmp_path / amd), str(nvidia), "--db", db, "--no-publish")
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert lines[0] == (
        f"imported {amd} for AMD_Instinct_MI300X as 'imported': 1 of vLLM's 18 M values: 3072; "
        "missing 1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 4096; "
        "other keys 5120; M=1 runs the M=3072 entry; M=4096 runs the M=5120 entry"
    )
    assert lines[-1] == (
        f"warning: SGLang 0.5.23 rewrites {amd} as it reads it: BLOCK_SIZE_K raised to 128 at "
        "M=5120 (BLOCK_SIZE_K 64), M=3072 (BLOCK_SIZE_K 32); it runs those entries, not the "
        "file's"
    )
    assert sum(line.startswith("warning:") for line in lines) == 1
    older = invoke(
        "import", str(tmp_path / amd), "--db", db, "--no-publish", "--engine-version", "0.5.11"
    )
    assert older.exit_code == 0 and "warning" not in older.stdout  # 0.5.11 rewrites nothing
