"""SGLang 0.5.23's own host code for config files, loaded from its wheel (`engine_code.load`):
the dense block-FP8 lookup and launch (sglang/kernels/ops/gemm/fp8_kernel.py) and the fused-MoE
lookup (sglang/srt/layers/moe/moe_runner/triton_utils/fused_moe_triton_config.py), reading the
files of a `Container`."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import triton

from tests.engines.container import Container, Logged
from tests.engines.engine_code import install_module, load_member
from tests.engines.vllm_host import meta_operands
from tuner.kernels.target import Capture

FP8_KERNEL = "sglang/kernels/ops/gemm/fp8_kernel.py"
MOE_CONFIG = "sglang/srt/layers/moe/moe_runner/triton_utils/fused_moe_triton_config.py"
MOE_PACKAGE = "sglang/srt/layers/moe/moe_runner/triton_utils/__init__.py"
# The folders of the files SGLang ships (the wheel's; `Container.install` copies them).
DENSE_CONFIGS = "sglang/kernels/ops/gemm/configs"
MOE_CONFIGS = "sglang/srt/layers/moe/moe_runner/triton_utils/configs"


def dense_lookup(
    wheel: Path,
    container: Container,
    gpu_name: str,
    logger: Logged,
    kernel: Capture,
    *,
    sm90: bool = True,
):
    """fp8_kernel.py's `get_w8a8_block_fp8_configs` and `w8a8_block_fp8_matmul_triton` on a
    CUDA GPU named `gpu_name` (SGLang's get_device_name is torch's name of it), with the Triton
    kernel replaced by `kernel`."""
    return load_member(
        wheel,
        FP8_KERNEL,
        [
            "get_w8a8_block_fp8_configs",
            "prepare_block_fp8_matmul_inputs",
            "select_w8a8_block_fp8_matmul_kernel",
            "w8a8_block_fp8_matmul_triton",
        ],
        {
            "torch": torch,
            "triton": triton,
            "logger": logger,
            "_is_cuda": True,
            "_is_hip": False,
            "_is_gfx1250": False,
            "get_device_name": lambda device_id=0: gpu_name,
            "log_info_on_rank0": lambda log, message: log.info(message),
            "get_platform": lambda: SimpleNamespace(is_sm90=sm90),
            "_w8a8_block_fp8_matmul": kernel,
        },
        container,
    )


def launch_dense(
    sglang, kernel: Capture, M: int, N: int, K: int, block_shape: tuple[int, int] = (128, 128)
) -> dict[str, object]:
    """The config `w8a8_block_fp8_matmul_triton` launches its kernel with for A [M, K] and a
    weight [N, K] (`meta_operands`), without the `needs_masking` flag it adds."""
    sglang.w8a8_block_fp8_matmul_triton(
        *meta_operands(M, N, K, block_shape), list(block_shape), torch.bfloat16
    )
    launched = kernel.calls.pop()[1]
    launched.pop("needs_masking")
    return launched


def moe_lookup(
    wheel: Path,
    monkeypatch: pytest.MonkeyPatch,
    container: Container,
    gpu_name: str,
    logger: Logged,
    triton_version: str,
):
    """fused_moe_triton_config.py's `get_config_file_name`, `get_moe_configs`,
    `get_default_config` and `try_get_optimal_moe_config` under Triton `triton_version` (the
    `configs/triton_<version>/` folder it reads first), no deterministic inference and no
    override config (SGLang's own `get_config`, triton_utils/__init__.py)."""
    package = load_member(wheel, MOE_PACKAGE, ["get_config"], {})
    install_module(
        monkeypatch,
        "sglang.srt.layers.moe.moe_runner.triton_utils",
        {"get_config": package.get_config},
    )
    no_determinism = SimpleNamespace(
        deterministic=SimpleNamespace(enable_deterministic_inference=False)
    )
    return load_member(
        wheel,
        MOE_CONFIG,
        [
            "get_config_file_name",
            "get_moe_configs",
            "get_default_config",
            "try_get_optimal_moe_config",
        ],
        {
            "torch": torch,
            "triton": SimpleNamespace(__version__=triton_version),
            "logger": logger,
            "_is_hip": False,
            "get_exec": lambda: no_determinism,
            "get_device_name": lambda device_id=0: gpu_name,
        },
        container,
    )
