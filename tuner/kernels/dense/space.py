"""The dense block-FP8 GEMM's config space: vLLM's tuning grid, the kernel's constraints and
vLLM's default config. Pure."""

from __future__ import annotations

from collections.abc import Callable
from itertools import product

from tuner.kernels.config import KernelConfig

# block_shape = [group_n, group_k] of the weight scales; vLLM's block-FP8 checkpoints use 128x128.
DEFAULT_BLOCK_SHAPE: tuple[int, int] = (128, 128)


def default_config(block_shape: tuple[int, int] = DEFAULT_BLOCK_SHAPE) -> KernelConfig:
    """The config vLLM runs at every M when no tuned file exists for (N, K, device).

    Source: `w8a8_triton_block_scaled_mm` in vLLM 0.33.0 (fp8_utils.py): BLOCK_SIZE_M 64,
    BLOCK_SIZE_N = group_n, BLOCK_SIZE_K = group_k, GROUP_SIZE_M 32, 4 warps, 2 stages.
    """
    return KernelConfig(64, block_shape[0], block_shape[1], 32, 4, 2)


# The axes of vLLM's tuning grid, outermost first, as its tuning script nests them
# (benchmarks/kernels/benchmark_w8a8_block_fp8.py, get_configs_compute_bound).
VLLM_AXES: dict[str, tuple[int, ...]] = {
    "num_stages": (2, 3, 4, 5),
    "BLOCK_SIZE_M": (16, 32, 64, 128, 256),
    "BLOCK_SIZE_K": (64, 128),
    "BLOCK_SIZE_N": (32, 64, 128, 256),
    "num_warps": (4, 8),
    "GROUP_SIZE_M": (1, 16, 32, 64),
}


def grid(axes: dict[str, tuple[int, ...]]) -> list[KernelConfig]:
    """Every config of a tuning script's axes, in its `itertools.product` order."""
    return [
        KernelConfig(**dict(zip(axes, values, strict=True))) for values in product(*axes.values())
    ]


def vllm_space() -> list[KernelConfig]:
    """vLLM's 1,280-config tuning grid, in the order its tuning script enumerates it."""
    return grid(VLLM_AXES)


def why_invalid(
    config: KernelConfig,
    block_shape: tuple[int, int],
    block_k: Callable[[KernelConfig, tuple[int, int]], int] | None = None,
) -> str | None:
    """The first constraint a config breaks with this block_shape, or None: block sizes are
    powers of two (tl.arange) of at least 16 (tl.dot's minimum); the BLOCK_SIZE_K a launch uses
    divides group_k (the kernel loads one scale pair per K-tile); num_warps is a power of two up
    to 32 (a CUDA block holds at most 1024 threads). Shared memory is the compiler's to decide,
    per architecture.

    Args:
        block_k: (config, block_shape) -> the BLOCK_SIZE_K a launch uses where the family's
            launch changes it (the fused MoE's `effective_block_k`); None: the config's.
    """
    for key in ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K"):
        size = getattr(config, key)
        if size < 16 or size & (size - 1):
            return f"{key}={size} is not a power of two >= 16"
    launched = config.BLOCK_SIZE_K if block_k is None else block_k(config, block_shape)
    if block_shape[1] % launched:
        how = "" if block_k is None else " (as launched)"
        return f"BLOCK_SIZE_K={launched}{how} does not divide group_k={block_shape[1]}"
    if config.num_warps > 32 or config.num_warps & (config.num_warps - 1):
        return f"num_warps={config.num_warps} is not a power of two <= 32"
    return None
