"""Which launches of the fused-MoE kernel compile to different binaries: Triton specializes
integer arguments equal to 1 and divisible by 16, and vLLM 0.33.0 picks two of the kernel's
constexpr switches from the batch and the GPU (`uses_naive_assignment`, `uses_swap_ab`)."""

from __future__ import annotations

from tuner.kernels.dense.specialization import _int_class
from tuner.kernels.moe.space import VLLM_AXES


def max_padded_slots(numel: int, num_experts: int, block_size: int) -> int:
    """Length of sorted_token_ids as vLLM 0.33.0 allocates it (moe_align_block_size.py):
    numel + E * (block_size - 1), or numel * block_size when there are fewer slots than
    experts."""
    if numel < num_experts:
        return numel * block_size
    return numel + num_experts * (block_size - 1)


def uses_naive_assignment(M: int, top_k: int, E: int) -> bool:
    """Whether vLLM runs the expert GEMMs at M tokens with one routed slot per program and no
    `moe_align_block_size` (the kernel's naive_block_assignment; sorted_token_ids None).

    Source: vLLM 0.33.0 fused_moe/fused_moe.py `_prepare_expert_assignment`: when there is no
    expert map (no expert parallelism), the weights are in device memory, the quantization is
    not int4/int8 weight-only with groups, and M * top_k * 4 <= E (the number of experts).
    """
    return M * top_k * 4 <= E


def uses_swap_ab(block_size_m: int, block_size_n: int, arch: int | None) -> bool:
    """Whether vLLM launches the fp8_w8a8 kernel with SWAP_AB for a config on a GPU.

    Source: vLLM 0.33.0 fused_moe/utils.py `enable_swap_ab`, called by
    `invoke_fused_moe_triton_kernel` for fp8_w8a8: compute capability exactly 9.0
    (`current_platform.is_device_capability(90)`), BLOCK_SIZE_M < 64 and BLOCK_SIZE_N >= 64.

    Args:
        block_size_m, block_size_n: the config's tile.
        arch: compute capability as an int (90 for sm90); None where there is no GPU (the
            interpreter), which vLLM treats as no capability.
    """
    return arch == 90 and block_size_m < 64 and block_size_n >= 64


def launch_em(
    slots: int, E: int, block_size_m: int, rows: int, launch_top_k: int, *, naive: bool = False
) -> int:
    """EM as vLLM 0.33.0's invoke_fused_moe_triton_kernel passes it: the alignment's length (for
    `slots` routed slots), cut to rows * launch_top_k * BLOCK_SIZE_M when A has fewer rows than
    BLOCK_SIZE_M; with naive assignment (no alignment) rows * launch_top_k * BLOCK_SIZE_M."""
    if naive:
        return rows * launch_top_k * block_size_m
    em = max_padded_slots(slots, E, block_size_m)
    return min(em, rows * launch_top_k * block_size_m) if rows < block_size_m else em


def moe_specialization_key(
    M: int, N: int, K: int, E: int, top_k: int, block_shape: tuple[int, int]
) -> str:
    """The part of a problem that selects a different binary of either GEMM, as a short string.

    The integer arguments are N, K, EM, num_valid_tokens and strides equal to K, N, N * K and
    the scale-grid sizes, for the gate_up launch (N' = 2N, K' = K, top_k) and the down launch
    (N' = K, K' = N, top_k 1). EM depends on BLOCK_SIZE_M, so its class is listed for every
    BLOCK_SIZE_M of the grid; for a given config the key then fixes the binary. A batch that
    vLLM runs with naive assignment (`uses_naive_assignment`) launches without
    sorted_token_ids, another binary: the key ends in ";naive". SWAP_AB is fixed by the config
    and the architecture, which the compile cache keys on already.
    """
    group_n, group_k = block_shape
    naive = uses_naive_assignment(M, top_k, E)
    parts = []
    for label, n, k, slots_k, rows in (("up", 2 * N, K, top_k, M), ("down", K, N, 1, M * top_k)):
        kg, ng = -(-k // group_k), -(-n // group_n)
        values = {"N": n, "K": k, "NK": n * k, "kg": kg, "sg": ng * kg, "T": M * top_k}
        text = ",".join(f"{name}={_int_class(value)}" for name, value in values.items())
        em = "".join(
            _int_class(launch_em(M * top_k, E, bm, rows, slots_k, naive=naive))[0]
            for bm in VLLM_AXES["BLOCK_SIZE_M"]
        )
        parts.append(f"{label}:{text},EM={em},topk={slots_k}")
    return ";".join(parts + ["naive"] * naive)
