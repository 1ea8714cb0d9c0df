"""Config space of the dense block-FP8 GEMM: vLLM's tuning grid, its constraints and its default."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import product

from tuner.kernels.config import KernelConfig

# block_shape = [group_n, group_k] of the weight scales; vLLM's block-FP8 checkpoints use 128x128.
DEFAULT_BLOCK_SHAPE: tuple[int, int] = (128, 128)


def default_config(block_shape: tuple[int, int] = DEFAULT_BLOCK_SHAPE) -> KernelConfig:
    """The config vLLM runs when no tuned file exists for (N, K, device).

    Source: `w8a8_triton_block_scaled_mm` in vLLM 0.33.0 (fp8_utils.py): BLOCK_SIZE_M 64,
    BLOCK_SIZE_N = group_n, BLOCK_SIZE_K = group_k, GROUP_SIZE_M 32, 4 warps, 2 stages.

    Args:
        block_shape: [group_n, group_k] of the weight scales.
    """
    group_n, group_k = block_shape
    return KernelConfig(64, group_n, group_k, 32, 4, 2)


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


def vllm_space() -> list[KernelConfig]:
    """vLLM's 1,280-config tuning grid, in the order its tuning script enumerates it."""
    names = list(VLLM_AXES)
    return [
        KernelConfig(**dict(zip(names, values, strict=True)))
        for values in product(*VLLM_AXES.values())
    ]


def check_block_k(config: KernelConfig, block_shape: tuple[int, int]) -> str | None:
    """BLOCK_SIZE_K must divide group_k: the kernel loads one scale pair per K-tile."""
    group_k = block_shape[1]
    if group_k % config.BLOCK_SIZE_K:
        return f"BLOCK_SIZE_K={config.BLOCK_SIZE_K} does not divide group_k={group_k}"
    return None


def check_powers_of_two(config: KernelConfig, block_shape: tuple[int, int]) -> str | None:
    """Block sizes must be powers of two (tl.arange) and at least 16 (tl.dot's minimum)."""
    for key in ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K"):
        size = getattr(config, key)
        if size < 16 or size & (size - 1):
            return f"{key}={size} is not a power of two >= 16"
    return None


def check_num_warps(config: KernelConfig, block_shape: tuple[int, int]) -> str | None:
    """num_warps must be a power of two from 1 to 32 (a CUDA block holds at most 1024 threads)."""
    if config.num_warps > 32 or config.num_warps & (config.num_warps - 1):
        return f"num_warps={config.num_warps} is not a power of two <= 32"
    return None


CONSTRAINTS = (check_powers_of_two, check_block_k, check_num_warps)


def why_invalid(config: KernelConfig, block_shape: tuple[int, int]) -> str | None:
    """First reason a config cannot run with this block_shape, or None if it passes every check.

    Shared-memory limits are the compiler's to decide, per architecture; they are not checked here.
    """
    for check in CONSTRAINTS:
        reason = check(config, block_shape)
        if reason is not None:
            return reason
    return None


def iter_valid(configs: list[KernelConfig], block_shape: tuple[int, int]) -> Iterator[KernelConfig]:
    """The configs that pass every constraint, in their given order."""
    return (config for config in configs if why_invalid(config, block_shape) is None)
