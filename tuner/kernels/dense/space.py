"""The dense block-FP8 GEMM's config space: vLLM's tuning grid, the kernel's constraints, vLLM's
default config, and which launches compile to one binary. Pure."""

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


def int_class(value: int) -> str:
    """How Triton's launcher specializes an integer argument (JITFunction's specialization,
    triton/runtime/jit.py): equal to 1, divisible by 16, or neither; i64 past int32."""
    kind = "1" if value == 1 else ("d16" if value % 16 == 0 else "any")
    return kind if -(2**31) <= value < 2**31 else kind + ":i64"


def specialization_key(M: int, N: int, K: int, block_shape: tuple[int, int]) -> str:
    """The part of (M, N, K, block_shape) that selects a different binary: each integer argument
    (M, N, K, group_n, group_k and the strides, which equal K, N or ceil(K / group_k)) by
    `int_class`; so M = 1, M % 16 == 0 and other M are three binaries of one shape.

    Returns:
        e.g. "M=1,N=d16,K=d16,gn=d16,gk=d16,kg=any" for M=1, N=5120, K=3072, [128, 128].
    """
    group_n, group_k = block_shape
    values = {"M": M, "N": N, "K": K, "gn": group_n, "gk": group_k, "kg": -(-K // group_k)}
    return ",".join(f"{name}={int_class(value)}" for name, value in values.items())
