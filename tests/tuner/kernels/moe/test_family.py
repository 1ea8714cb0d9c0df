"""The fused-MoE family: vLLM's MoE file names, tuning space, per-M default and compile
specialization (a task of it tuned, stored and exported end to end: tests/cli/test_moe_sweep.py)."""

from __future__ import annotations

import pytest

from tuner.kernels.config import KernelConfig
from tuner.kernels.moe.family import MOE, moe_config_file_name
from tuner.kernels.moe.space import default_config, vllm_space
from tuner.kernels.shape import Shape

QWEN3_TP2 = Shape(384, 2048, (128, 128), (("E", 128), ("top_k", 8)))


def test_file_names_are_vllms_with_the_h200_rule_and_sglangs_without() -> None:
    name = "E=128,N=384,device_name={},dtype=fp8_w8a8,block_shape=[128{}128].json"

    def spelled(device_name: str, engine: str) -> str:
        return MOE.files.file_name(QWEN3_TP2, device_name, engine)

    h100 = "NVIDIA_H100_80GB_HBM3"
    assert spelled(h100, "vllm") == name.format(h100, ",")
    # Every device of the H200 family is NVIDIA_H200 in vLLM 0.33.0's MoE names; SGLang's
    # get_config_file_name keeps the device and writes the block shape as a Python list.
    nvl = "NVIDIA_H200_NVL"
    vllm_name, sglang_name = name.format("NVIDIA_H200", ","), name.format(nvl, ", ")
    assert spelled(nvl, "vllm") == vllm_name == moe_config_file_name(128, 384, nvl)
    assert spelled(nvl, "sglang") == sglang_name == MOE.respell(vllm_name, "sglang", nvl)
    assert MOE.respell(vllm_name, "sglang") == name.format("NVIDIA_H200", ", ")
    assert MOE.respell(sglang_name, "vllm", nvl) == vllm_name
    gh200 = moe_config_file_name(8, 64, "NVIDIA_GH200_480GB")
    assert gh200.startswith("E=8,N=64,device_name=NVIDIA_GH200_480GB,")
    parsed = MOE.files.parse_file_name(name.format("NVIDIA_H200", ", ").replace("128,N", "256,N"))
    assert parsed == (Shape(384, 0, (128, 128), (("E", 256),)), "NVIDIA_H200", "fp8_w8a8")
    with pytest.raises(ValueError, match="not a config file name like .E=128,N=384"):
        MOE.files.parse_file_name("E=128,N=384,device_name=NVIDIA_H200,dtype=fp8_w8a8.json")


def test_the_default_depends_on_m_as_vllm_0_33_0s() -> None:
    # vLLM 0.33.0's get_default_config (fused_moe.py), block-FP8 on CUDA: a 64-wide N tile up to
    # M = 8 (group_n a multiple of 64), 4 stages only up to M = 4.
    Ms = (1, 4, 5, 8, 9, 16, 17, 64, 65)
    assert [MOE.default_config(QWEN3_TP2, M).short() for M in Ms] == [
        *(["16x64x128 g1 w4 s4"] * 2),
        *(["16x64x128 g1 w4 s3"] * 2),
        *(["16x128x128 g1 w4 s3"] * 2),
        *(["16x128x128 g32 w4 s3"] * 2),
        "64x128x128 g32 w4 s3",
    ]
    assert default_config(4096) == KernelConfig(64, 128, 128, 32, 4, 3)
    # group_n 96 is no multiple of 64: its own width and 3 stages even at M = 1; 192 is one.
    assert default_config(1, (96, 128)) == KernelConfig(16, 96, 128, 1, 4, 3)
    assert default_config(1, (192, 64)) == KernelConfig(16, 64, 64, 1, 4, 4)
    assert default_config(8, (192, 64)) == KernelConfig(16, 64, 64, 1, 4, 3)
    with pytest.raises(ValueError, match="M must be positive, got 0"):
        default_config(0)


def test_the_space_is_benchmark_moes_grid_in_its_order() -> None:
    space = vllm_space()
    assert MOE.space() == space and len(space) == 1920 and len(set(space)) == 1920
    assert space[0] == KernelConfig(16, 32, 64, 1, 4, 2)
    assert space[1] == KernelConfig(16, 32, 64, 1, 4, 3)  # num_stages innermost
    assert space[-1] == KernelConfig(256, 256, 256, 64, 8, 5)
    assert all(MOE.why_invalid(config, QWEN3_TP2) is None for config in space)
    assert MOE.why_invalid(KernelConfig(16, 64, 32, 1, 4, 2), Shape(64, 64, (128, 96))) is None
    assert MOE.why_invalid(KernelConfig(16, 64, 64, 1, 4, 2), Shape(64, 64, (128, 96))) == (
        "BLOCK_SIZE_K=64 (as launched) does not divide group_k=96"
    )
