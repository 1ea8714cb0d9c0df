"""The fused-MoE experts' config space: vLLM's tuning grid, the kernel's constraints, vLLM
0.33.0's per-M default and the launch rules vLLM applies at M (naive assignment, SWAP_AB, the
BLOCK_SIZE_K cap). Pure."""

from __future__ import annotations

from functools import partial

from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.space import DEFAULT_BLOCK_SHAPE, grid
from tuner.kernels.dense.space import why_invalid as dense_why_invalid


def default_config(M: int, block_shape: tuple[int, int] = DEFAULT_BLOCK_SHAPE) -> KernelConfig:
    """The config vLLM 0.33.0 runs at M tokens when no E=...,N=... file exists (CUDA).

    Source: `get_default_config` in vllm/model_executor/layers/fused_moe/fused_moe.py, its
    `dtype == "fp8_w8a8" and block_shape is not None` branch: BLOCK_SIZE_M 16 if M <= 64 else
    64, BLOCK_SIZE_K = group_k, GROUP_SIZE_M 1 if M <= 16 else 32, 4 warps; BLOCK_SIZE_N 64 at
    M <= 8 when group_n is a multiple of 64, else group_n; num_stages 4 at M <= 4 (with the
    64-wide tile), else 3. SPLIT_K (forced to 1) and ROCm are not modelled; tests/engines runs
    vLLM's own function against this one for every M from 1 to 8,192.

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


def vllm_space() -> list[KernelConfig]:
    """benchmark_moe.py's grid in its order: 1,920 configs (its block-quant filter, BLOCK_SIZE_N
    and BLOCK_SIZE_K a multiple or a divisor of the 128x128 blocks, passes them all; BLOCK_SIZE_K
    256 runs as 128, see `effective_block_k`)."""
    return grid(VLLM_AXES)


def effective_block_k(config: KernelConfig, block_shape: tuple[int, int]) -> int:
    """The BLOCK_SIZE_K a launch uses: vLLM 0.33.0's invoke_fused_moe_kernel takes
    min(BLOCK_SIZE_K, min(block_shape))."""
    return min(config.BLOCK_SIZE_K, min(block_shape))


# The dense GEMM's constraints, with the BLOCK_SIZE_K a launch uses (`effective_block_k`).
why_invalid = partial(dense_why_invalid, block_k=effective_block_k)


def max_padded_slots(numel: int, num_experts: int, block_size: int) -> int:
    """Length of sorted_token_ids as vLLM 0.33.0 allocates it (moe_align_block_size.py):
    numel + E * (block_size - 1), or numel * block_size when there are fewer slots than
    experts."""
    if numel < num_experts:
        return numel * block_size
    return numel + num_experts * (block_size - 1)


def uses_naive_assignment(M: int, top_k: int, E: int) -> bool:
    """Whether vLLM runs the expert GEMMs at M tokens with one routed slot per program and no
    `moe_align_block_size` (sorted_token_ids None): vLLM 0.33.0 fused_moe.py
    `_prepare_expert_assignment`, without expert parallelism, when M * top_k * 4 <= E."""
    return M * top_k * 4 <= E


def uses_swap_ab(block_size_m: int, block_size_n: int, arch: int | None) -> bool:
    """Whether vLLM launches the fp8_w8a8 kernel with SWAP_AB (vLLM 0.33.0 fused_moe/utils.py
    `enable_swap_ab`): compute capability exactly 90, BLOCK_SIZE_M < 64 and BLOCK_SIZE_N >= 64;
    `arch` None where there is no GPU (the interpreter), which vLLM treats as no capability."""
    return arch == 90 and block_size_m < 64 and block_size_n >= 64
