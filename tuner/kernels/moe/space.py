"""Config space of the fused-MoE block-FP8 experts: vLLM's tuning grid filtered by its block-quant
rule, the constraints of our kernel, and vLLM 0.33.0's per-M default config."""

from __future__ import annotations

from itertools import product

from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.space import check_num_warps, check_powers_of_two

DEFAULT_BLOCK_SHAPE: tuple[int, int] = (128, 128)


def default_config(M: int, block_shape: tuple[int, int] = DEFAULT_BLOCK_SHAPE) -> KernelConfig:
    """The config vLLM 0.33.0 runs at M tokens when no E=...,N=... file exists (CUDA).

    Source: `get_default_config` in vllm/model_executor/layers/fused_moe/fused_moe.py (vLLM
    0.33.0), its `dtype == "fp8_w8a8" and block_shape is not None` branch on CUDA:
    BLOCK_SIZE_M 16 if M <= 64 else 64, BLOCK_SIZE_K = group_k, GROUP_SIZE_M 1 if M <= 16
    else 32, 4 warps; BLOCK_SIZE_N 64 at M <= 8 when group_n is a multiple of 64, else group_n;
    num_stages 4 at M <= 4 and 3 from M = 5 on (M = 5..8 keep the 64-wide N tile with 3
    stages). vLLM also writes SPLIT_K 1, which its launcher forces anyway; ROCm (2 stages,
    N tile = group_n) is not modelled. tests/engines runs vLLM's own function against this one
    for every M from 1 to 8,192.

    Args:
        M: tokens in the batch (the lookup key of a file).
        block_shape: [group_n, group_k] of the weight scales.

    Returns:
        The six tuned keys, e.g. 16x64x128 g1 w4 s4 at M = 1 for [128, 128].

    Raises:
        ValueError: M is not positive.
    """
    if M < 1:
        raise ValueError(f"M must be positive, got {M}")
    group_n, group_k = block_shape
    narrow = M <= 8 and group_n % 64 == 0
    return KernelConfig(
        BLOCK_SIZE_M=16 if M <= 64 else 64,
        BLOCK_SIZE_N=64 if narrow else group_n,
        BLOCK_SIZE_K=group_k,
        GROUP_SIZE_M=1 if M <= 16 else 32,
        num_warps=4,
        num_stages=4 if narrow and M <= 4 else 3,
    )


# The axes of benchmark_moe.py's CUDA grid (get_configs_compute_bound, vLLM 0.33.0), in the
# order its itertools.product nests them: BLOCK_SIZE_M outermost, num_stages innermost.
VLLM_AXES: dict[str, tuple[int, ...]] = {
    "BLOCK_SIZE_M": (16, 32, 64, 128, 256),
    "BLOCK_SIZE_N": (32, 64, 128, 256),
    "BLOCK_SIZE_K": (64, 128, 256),
    "GROUP_SIZE_M": (1, 16, 32, 64),
    "num_warps": (4, 8),
    "num_stages": (2, 3, 4, 5),
}


def fits_block_quant(config: KernelConfig, block_shape: tuple[int, int]) -> bool:
    """benchmark_moe.py's block-quant filter since vLLM pull request 46642: BLOCK_SIZE_N is a
    multiple or a divisor of group_n, and BLOCK_SIZE_K a multiple or a divisor of group_k."""
    group_n, group_k = block_shape

    def fits(size: int, group: int) -> bool:
        return size % group == 0 or group % size == 0

    return fits(config.BLOCK_SIZE_N, group_n) and fits(config.BLOCK_SIZE_K, group_k)


def vllm_space(block_shape: tuple[int, int] = DEFAULT_BLOCK_SHAPE) -> list[KernelConfig]:
    """benchmark_moe.py's grid in its order, filtered by `fits_block_quant` (all 1,920 configs
    pass for [128, 128]; BLOCK_SIZE_K 256 runs as 128, see `effective_block_k`)."""
    names = list(VLLM_AXES)
    configs = [
        KernelConfig(**dict(zip(names, values, strict=True)))
        for values in product(*VLLM_AXES.values())
    ]
    return [config for config in configs if fits_block_quant(config, block_shape)]


def effective_block_k(config: KernelConfig, block_shape: tuple[int, int]) -> int:
    """The BLOCK_SIZE_K a launch uses: vLLM 0.33.0's invoke_fused_moe_kernel takes
    min(BLOCK_SIZE_K, min(block_shape))."""
    return min(config.BLOCK_SIZE_K, min(block_shape))


def check_block_k(config: KernelConfig, block_shape: tuple[int, int]) -> str | None:
    """The launched BLOCK_SIZE_K must divide group_k: one scale pair per K-tile."""
    block_k = effective_block_k(config, block_shape)
    if block_shape[1] % block_k:
        return f"BLOCK_SIZE_K={block_k} (as launched) does not divide group_k={block_shape[1]}"
    return None


CONSTRAINTS = (check_powers_of_two, check_block_k, check_num_warps)


def why_invalid(config: KernelConfig, block_shape: tuple[int, int]) -> str | None:
    """First reason a config cannot run with this block_shape, or None; shared memory is the
    compiler's to decide."""
    for check in CONSTRAINTS:
        reason = check(config, block_shape)
        if reason is not None:
            return reason
    return None
