"""Compile the fused-MoE kernel for a GPU architecture without a GPU, specialized as Triton's
launcher specializes each of the two launches of the expert MLP."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.target import (
    DEFAULT_TORCH_DTYPE,
    POINTER_TYPES,
    argument_specialization,
    compile_specialized,
)
from tuner.kernels.moe.kernel import OUT_DTYPES, fused_moe_fp8_block_kernel, parse_config
from tuner.kernels.moe.space import effective_block_k
from tuner.kernels.moe.specialization import launch_em, uses_naive_assignment, uses_swap_ab


def launch_specialization(
    config: KernelConfig,
    *,
    N: int,
    K: int,
    EM: int,
    slots: int,
    top_k: int,
    mul_routed_weight: bool,
    block_shape: tuple[int, int],
    out_dtype: torch.dtype,
    naive: bool = False,
    swap_ab: bool = False,
) -> tuple[dict, dict, dict]:
    """(signature, constexprs, attrs) of one launch with contiguous, 16-byte aligned tensors
    (the rules of `tuner.kernels.dense.target.launch_specialization`), as `invoke_moe_gemm`
    launches it.

    Args:
        N, K: the launch's B [E, N, K].
        EM: the launch's EM (`launch_em`).
        slots: num_valid_tokens (rows of C).
        top_k: the launch's top_k (1 for the down GEMM).
        mul_routed_weight: the down GEMM.
        naive: naive assignment: sorted_token_ids is None, a constant to Triton.
        swap_ab: the SWAP_AB switch (`uses_swap_ab`).
    """
    group_n, group_k = block_shape
    kg, ng = -(-K // group_k), -(-N // group_n)
    ints = {
        "N": N,
        "K": K,
        "EM": EM,
        "num_valid_tokens": slots,
        "stride_am": K,
        "stride_ak": 1,
        "stride_be": N * K,
        "stride_bk": 1,
        "stride_bn": K,
        "stride_cm": N,
        "stride_cn": 1,
        "stride_asm": kg,
        "stride_ask": 1,
        "stride_bse": ng * kg,
        "stride_bsk": 1,
        "stride_bsn": kg if ng > 1 else 0,
    }  # stride_bsn: 0 for one block of N, as invoke_moe_gemm passes it
    pointers = {
        "a_ptr": "*fp8e4nv",
        "b_ptr": "*fp8e4nv",
        "c_ptr": POINTER_TYPES[out_dtype],
        "a_scale_ptr": "*fp32",
        "b_scale_ptr": "*fp32",
        "topk_weights_ptr": "*fp32",
        "sorted_token_ids_ptr": "*i32",
        "expert_ids_ptr": "*i32",
        "num_tokens_post_padded_ptr": "*i32",
    }
    meta: dict[str, Any] = {}
    if naive:  # Triton's launcher makes a None argument the constant None
        del pointers["sorted_token_ids_ptr"]
        meta["sorted_token_ids_ptr"] = None
    meta |= {
        "group_n": group_n,
        "group_k": group_k,
        "naive_block_assignment": naive,
        "BLOCK_SIZE_M": config.BLOCK_SIZE_M,
        "BLOCK_SIZE_N": config.BLOCK_SIZE_N,
        "BLOCK_SIZE_K": effective_block_k(config, block_shape),
        "GROUP_SIZE_M": config.GROUP_SIZE_M,
        "MUL_ROUTED_WEIGHT": mul_routed_weight,
        "top_k": top_k,
        "SWAP_AB": swap_ab,
    }
    return argument_specialization(fused_moe_fp8_block_kernel.fn, pointers, ints, meta)


def compile_for_target(
    config: Mapping[str, int],
    arch: int,
    *,
    M: int,
    N: int,
    K: int,
    E: int,
    top_k: int,
    block_shape: tuple[int, int] = (128, 128),
    out_dtype: torch.dtype = DEFAULT_TORCH_DTYPE,
) -> Any:
    """Compile both launches of the expert MLP (gate_up: B [E, 2N, K], top_k; down: B [E, K, N],
    top_k 1, routing weights) for an NVIDIA architecture, as a launch at M tokens on that
    architecture specializes them (naive assignment and SWAP_AB where vLLM uses them); both
    binaries land in Triton's cache.

    Returns:
        The gate_up launch's CompiledKernel (both use the same tiles, so the same shared memory).

    Raises:
        ValueError: bad config, block_shape, out_dtype or sizes.
        RuntimeError: imported under TRITON_INTERPRET=1.
        triton.CompilationError: the compiler rejected the kernel.
    """
    parsed = parse_config(config, block_shape)
    if out_dtype not in OUT_DTYPES:
        raise ValueError(f"out_dtype must be torch.bfloat16 or torch.float16, got {out_dtype}")
    if min(M, N, K, E, top_k) <= 0:
        raise ValueError(f"M, N, K, E, top_k must be positive, got {M}, {N}, {K}, {E}, {top_k}")
    slots = M * top_k
    naive = uses_naive_assignment(M, top_k, E)
    swap_ab = uses_swap_ab(parsed.BLOCK_SIZE_M, parsed.BLOCK_SIZE_N, arch)
    launches = (
        (2 * N, K, launch_em(slots, E, parsed.BLOCK_SIZE_M, M, top_k, naive=naive), top_k, False),
        (K, N, launch_em(slots, E, parsed.BLOCK_SIZE_M, slots, 1, naive=naive), 1, True),
    )
    kernels = []
    for n, k, em, launch_top_k, weighted in launches:
        specialization = launch_specialization(
            parsed,
            N=n,
            K=k,
            EM=em,
            slots=slots,
            top_k=launch_top_k,
            mul_routed_weight=weighted,
            block_shape=block_shape,
            out_dtype=out_dtype,
            naive=naive,
            swap_ab=swap_ab,
        )
        kernels.append(
            compile_specialized(fused_moe_fp8_block_kernel, specialization, arch, parsed)
        )
    return kernels[0]
