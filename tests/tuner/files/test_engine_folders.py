"""The table of engine folders by release, and the entries SGLang rewrites as it reads a file:
exact folders per release, exact lines, and SGLang's clamp rule at every BLOCK_SIZE_K."""

from __future__ import annotations

import pytest

from tests.storefill import FAST
from tuner.files.engine_folders import (
    folder_for,
    folder_history,
    sglang_clamp_lines,
    sglang_clamped,
    triton_folder,
    version_key,
)
from tuner.kernels.registry import FAMILIES

ENTRY = {**FAST, "BLOCK_SIZE_N": 128}


SGL_MOE = "sglang/srt/layers/moe/"


# The other rows, through the mount lines: tests/tuner/files/test_mounts.py.
@pytest.mark.parametrize(
    ("engine", "family", "version", "folder"),
    [
        ("vllm", "moe", None, "vllm/model_executor/layers/fused_moe/configs"),
        ("sglang", "dense", "0.5.21", "sglang/kernels/ops/gemm/configs"),
        ("sglang", "moe", "0.5.11", f"{SGL_MOE}moe_runner/triton_utils/configs/triton_3_8_0"),
    ],
)
def test_folder_of_each_release(engine: str, family: str, version: str | None, folder: str) -> None:
    assert folder_for(engine, family, version, "3.8.0") == folder


def test_the_families_have_one_row_per_engine_family_and_first_version() -> None:
    rows = [
        (family.name, row) for family in FAMILIES.values() for row in family.files.engine_folders
    ]
    keys = [(row.engine, name, version_key(row.first_version)) for name, row in rows]
    assert len(keys) == len(set(keys))
    # Every engine that reads a family's files has a row for every release ("0").
    firsts = {(row.engine, name) for name, row in rows if row.first_version == "0"}
    assert firsts == {(row.engine, name) for name, row in rows}


def test_versions_sort_as_releases_and_triton_names_its_folder() -> None:
    assert version_key("0.5.15.post1") > version_key("0.5.15") > version_key("0.5.14")
    assert version_key("v0.33.0") == version_key("0.33.0") == version_key("0.33.0+cu130")
    assert version_key("0.34.0.dev3+g1a2b") == version_key("0.34.0") > version_key("0.33.9")
    for bad in ("", "latest", "1..2", "0.5.23;rm"):
        with pytest.raises(ValueError, match="is not a release number like 0.5.23"):
            version_key(bad)
    assert triton_folder("3.8.0") == "triton_3_8_0"
    for bad in ("3.8", "3.8.0+git1", "3.8.0rc1", "../3.8.0"):
        with pytest.raises(ValueError, match="is not like 3.8.0"):
            triton_folder(bad)


def test_history_lines() -> None:
    assert folder_history("sglang", "dense") == [
        "before 0.5.16: sglang/srt/layers/quantization/configs",
        "0.5.16 to before 0.5.21: sglang/kernels/ops/quantization/configs",
        "0.5.21 and later: sglang/kernels/ops/gemm/configs",
    ]
    assert folder_history("vllm", "dense") == [
        "every release: vllm/model_executor/layers/quantization/utils/configs"
    ]


def _sglang_0_5_23_clamps(block: int, block_k: int, cuda: bool) -> bool:
    # SGLang 0.5.23, sglang/kernels/ops/gemm/fp8_kernel.py, get_w8a8_block_fp8_configs:
    # cfg["BLOCK_SIZE_K"] < block_k and (not _is_cuda or block_k % cfg["BLOCK_SIZE_K"] != 0)
    return block < block_k and (not cuda or block_k % block != 0)


@pytest.mark.parametrize("device_name", ["NVIDIA_L20", "AMD_Instinct_MI300X"])
@pytest.mark.parametrize("block_k", [64, 96, 128])
def test_clamp_rule_of_0_5_23_at_every_block_size_k(device_name: str, block_k: int) -> None:
    configs = {M: {**ENTRY, "BLOCK_SIZE_K": M} for M in range(1, 257)}  # M key = BLOCK_SIZE_K
    cuda = device_name.startswith("NVIDIA")
    expected = [(M, M) for M in configs if _sglang_0_5_23_clamps(M, block_k, cuda)]
    assert sglang_clamped(configs, block_k, device_name) == expected
    assert sglang_clamped(configs, block_k, device_name, "0.5.14") == expected


def test_clamp_rule_by_release() -> None:
    configs = {M: {**ENTRY, "BLOCK_SIZE_K": block} for M, block in ((1, 64), (16, 128), (32, 48))}
    assert sglang_clamped(configs, 128, "NVIDIA_L20") == [(32, 48)]  # 64 divides 128 on CUDA
    assert sglang_clamped(configs, 128, "AMD_Instinct_MI300X") == [(1, 64), (32, 48)]
    assert sglang_clamped(configs, 128, "NVIDIA_L20", "0.5.12") == [(1, 64), (32, 48)]
    assert sglang_clamped(configs, 128, "NVIDIA_L20", "0.5.11") == []


def test_clamp_lines() -> None:
    name = "N=576,K=7168,device_name=AMD_Instinct_MI300X,dtype=fp8_w8a8,block_shape=[128, 128].json"
    moe = "E=8,N=512,device_name=AMD_Instinct_MI300X,dtype=fp8_w8a8,block_shape=[128, 128].json"
    configs = {4096: {**ENTRY, "BLOCK_SIZE_K": 64}, 1: {**ENTRY, "BLOCK_SIZE_K": 32}, 16: ENTRY}
    assert sglang_clamp_lines([(name, configs), (moe, configs)], "AMD_Instinct_MI300X") == [
        f"SGLang 0.5.23 rewrites {name} as it reads it: BLOCK_SIZE_K raised to 128 at "
        "M=4096 (BLOCK_SIZE_K 64), M=1 (BLOCK_SIZE_K 32); it runs those entries, not the file's"
    ]
    h200 = name.replace("AMD_Instinct_MI300X", "NVIDIA_H200")
    assert sglang_clamp_lines([(h200, configs)], "NVIDIA_H200") == []
