"""vLLM 0.33.0's own host code for config files, loaded from its wheel (`engine_code.load`):
the device-name rule, the dense lookup and launch, the fused-MoE lookup and default.

Each loader gives the functions what vLLM's module imports would (a `Platform`, `VllmEnvs`, a
`Logged` logger, real torch and triton) and `__file__` at the module's place in a `Container`,
so vLLM's `os.path.dirname(os.path.realpath(__file__))/configs` is the container's folder.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import triton

from tests.engines.container import Container, Logged, Platform, VllmEnvs
from tests.engines.engine_code import install_module, load_member
from tuner.kernels.target import Capture

PLATFORM_UTILS = "vllm/utils/platform_utils.py"
FP8_UTILS = "vllm/model_executor/layers/quantization/utils/fp8_utils.py"
FUSED_MOE = "vllm/model_executor/layers/fused_moe/fused_moe.py"
FUSED_MOE_PACKAGE = "vllm/model_executor/layers/fused_moe/__init__.py"
# The folders of the files vLLM ships (the wheel's; `Container.install` copies them).
DENSE_CONFIGS = "vllm/model_executor/layers/quantization/utils/configs"
MOE_CONFIGS = "vllm/model_executor/layers/fused_moe/configs"


def device_name_rule(wheel: Path, monkeypatch: pytest.MonkeyPatch, platform: Platform):
    """vLLM's `get_device_name_as_file_name` (platform_utils.py) on `platform`'s GPU: the
    function imports `current_platform` when called, from a `vllm.platforms` set up here.
    It is cached (functools.cache): `cache_clear()` after changing `platform.gpu_name`."""
    install_module(monkeypatch, "vllm.platforms", {"current_platform": platform})
    # vLLM imports the `regex` package as re; for this pattern ([\s/]+ on str) the standard re
    # matches the same characters.
    return load_member(
        wheel, PLATFORM_UTILS, ["get_device_name_as_file_name"], {"re": re}
    ).get_device_name_as_file_name


def dense_lookup(
    wheel: Path,
    monkeypatch: pytest.MonkeyPatch,
    container: Container,
    platform: Platform,
    logger: Logged,
    kernel: Capture,
):
    """fp8_utils.py's `get_w8a8_block_fp8_configs` and `w8a8_triton_block_scaled_mm` with the
    Triton kernel replaced by `kernel`, reading the container's files."""
    return load_member(
        wheel,
        FP8_UTILS,
        ["get_w8a8_block_fp8_configs", "w8a8_triton_block_scaled_mm"],
        {
            "torch": torch,
            "triton": triton,
            "envs": VllmEnvs(),
            "logger": logger,
            "current_platform": platform,
            "_w8a8_triton_block_scaled_mm": kernel,
            "get_device_name_as_file_name": device_name_rule(wheel, monkeypatch, platform),
        },
        container,
    )


def meta_operands(
    M: int, N: int, K: int, block_shape: tuple[int, int] = (128, 128)
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A [M, K] and the weight B [N, K] in FP8 e4m3 with their float32 scales As
    [M, ceil(K / group_k)] and Bs [ceil(N / group_n), ceil(K / group_k)], as meta tensors:
    shapes and strides for the host code, nothing to compute."""
    group_n, group_k = block_shape
    meta = {"device": "meta"}
    return (
        torch.empty((M, K), dtype=torch.float8_e4m3fn, **meta),
        torch.empty((N, K), dtype=torch.float8_e4m3fn, **meta),
        torch.empty((M, triton.cdiv(K, group_k)), dtype=torch.float32, **meta),
        torch.empty(
            (triton.cdiv(N, group_n), triton.cdiv(K, group_k)), dtype=torch.float32, **meta
        ),
    )


def launch_dense(
    vllm, kernel: Capture, M: int, N: int, K: int, block_shape: tuple[int, int] = (128, 128)
) -> dict[str, object]:
    """The config `w8a8_triton_block_scaled_mm` launches its kernel with for A [M, K] and a
    weight [N, K] (`meta_operands`): the keyword arguments of the launch `kernel` captured."""
    vllm.w8a8_triton_block_scaled_mm(
        *meta_operands(M, N, K, block_shape), list(block_shape), torch.bfloat16
    )
    return kernel.calls.pop()[1]


def moe_lookup(
    wheel: Path,
    monkeypatch: pytest.MonkeyPatch,
    container: Container,
    platform: Platform,
    logger: Logged,
):
    """fused_moe.py's `get_config_file_name`, `get_moe_configs`, `get_default_config` and
    `try_get_optimal_moe_config`, reading the container's files; the `get_config` that
    `try_get_optimal_moe_config` imports when called is vLLM's own (fused_moe/__init__.py, no
    override in force)."""
    package = load_member(wheel, FUSED_MOE_PACKAGE, ["get_config"], {})
    install_module(
        monkeypatch,
        "vllm.model_executor.layers.fused_moe",
        {"get_config": package.get_config},
    )
    return load_member(
        wheel,
        FUSED_MOE,
        [
            "get_config_file_name",
            "get_moe_configs",
            "get_default_config",
            "try_get_optimal_moe_config",
        ],
        {
            "torch": torch,
            "envs": VllmEnvs(),
            "logger": logger,
            "current_platform": platform,
            "get_device_name_as_file_name": device_name_rule(wheel, monkeypatch, platform),
        },
        container,
    )
