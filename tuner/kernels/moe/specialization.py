"""Which launches of the fused-MoE kernel compile to different binaries (Triton specializes
integer arguments equal to 1 and divisible by 16, DESIGN §4)."""

from __future__ import annotations

from tuner.kernels.dense.specialization import _int_class


def max_padded_slots(numel: int, num_experts: int, block_size: int) -> int:
    """Length of sorted_token_ids as vLLM 0.33.0 allocates it (moe_align_block_size.py):
    numel + E * (block_size - 1), or numel * block_size when there are fewer slots than
    experts."""
    if numel < num_experts:
        return numel * block_size
    return numel + num_experts * (block_size - 1)


# BLOCK_SIZE_M values of the tuning grid (tuner.kernels.moe.space.VLLM_AXES).
BLOCK_SIZES_M = (16, 32, 64, 128, 256)


def launch_em(slots: int, E: int, block_size_m: int, rows: int, launch_top_k: int) -> int:
    """EM as vLLM 0.33.0's invoke_fused_moe_kernel passes it: the alignment's length (for
    `slots` routed slots), cut to rows * launch_top_k * BLOCK_SIZE_M when A has fewer rows than
    BLOCK_SIZE_M."""
    em = max_padded_slots(slots, E, block_size_m)
    return min(em, rows * launch_top_k * block_size_m) if rows < block_size_m else em


def moe_specialization_key(M: int, N: int, K: int, E: int, top_k: int,
                           block_shape: tuple[int, int]) -> str:
    """The part of a problem that selects a different binary of either GEMM, as a short string.

    The integer arguments are N, K, EM, num_valid_tokens and strides equal to K, N, N * K and
    the scale-grid sizes, for the gate_up launch (N' = 2N, K' = K, top_k) and the down launch
    (N' = K, K' = N, top_k 1). EM depends on BLOCK_SIZE_M, so its class is listed for every
    BLOCK_SIZE_M of the grid; for a given config the key then fixes the binary.
    """
    group_n, group_k = block_shape
    parts = []
    for label, n, k, slots_k, rows in (("up", 2 * N, K, top_k, M), ("down", K, N, 1, M * top_k)):
        kg, ng = -(-k // group_k), -(-n // group_n)
        values = {"N": n, "K": k, "NK": n * k, "kg": kg, "sg": ng * kg, "T": M * top_k}
        text = ",".join(f"{name}={_int_class(value)}" for name, value in values.items())
        em = "".join(_int_class(launch_em(M * top_k, E, bm, rows, slots_k))[0]
                     for bm in BLOCK_SIZES_M)
        parts.append(f"{label}:{text},EM={em},topk={slots_k}")
    return ";".join(parts)
