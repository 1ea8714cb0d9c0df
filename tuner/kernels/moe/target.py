"""Compile the fused-MoE kernel for a GPU architecture without a GPU, specialized as Triton's
launcher specializes each of the two launches of the expert MLP."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

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


class Launch(NamedTuple):
    """One of the expert MLP's two GEMM launches as `invoke_moe_gemm` makes it: B [E, N, K],
    its EM (`launch_em`), num_valid_tokens (`slots`, rows of C), its top_k (1 for the down
    GEMM) and whether it multiplies the routing weights (the down GEMM)."""

    N: int
    K: int
    EM: int
    slots: int
    top_k: int
    mul_routed_weight: bool


def _integers(launch: Launch, block_shape: tuple[int, int]) -> dict[str, int]:
    """The launch's integer arguments with contiguous tensors; stride_bsn is 0 for one block
    of N, as invoke_moe_gemm passes it."""
    N, K = launch.N, launch.K
    kg, ng = -(-K // block_shape[1]), -(-N // block_shape[0])
    return {
        "N": N,
        "K": K,
        "EM": launch.EM,
        "num_valid_tokens": launch.slots,
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
    }


def launch_specialization(
    config: KernelConfig,
    launch: Launch,
    *,
    block_shape: tuple[int, int],
    out_dtype: torch.dtype,
    naive: bool = False,
    swap_ab: bool = False,
) -> tuple[dict, dict, dict]:
    """(signature, constexprs, attrs) of one launch with contiguous, 16-byte aligned tensors
    (the rules of `tuner.kernels.dense.target.argument_specialization`), as `invoke_moe_gemm`
    launches it; `naive`: naive assignment (sorted_token_ids None, a constant to Triton);
    `swap_ab`: the SWAP_AB switch (`uses_swap_ab`)."""
    pointers = {"a_ptr": "*fp8e4nv", "b_ptr": "*fp8e4nv", "c_ptr": POINTER_TYPES[out_dtype]}
    for name in ("a_scale_ptr", "b_scale_ptr", "topk_weights_ptr"):
        pointers[name] = "*fp32"
    for name in ("sorted_token_ids_ptr", "expert_ids_ptr", "num_tokens_post_padded_ptr"):
        pointers[name] = "*i32"
    meta: dict[str, Any] = {}
    if naive:  # Triton's launcher makes a None argument the constant None
        del pointers["sorted_token_ids_ptr"]
        meta["sorted_token_ids_ptr"] = None
    meta |= {
        "group_n": block_shape[0],
        "group_k": block_shape[1],
        "naive_block_assignment": naive,
        "BLOCK_SIZE_M": config.BLOCK_SIZE_M,
        "BLOCK_SIZE_N": config.BLOCK_SIZE_N,
        "BLOCK_SIZE_K": effective_block_k(config, block_shape),
        "GROUP_SIZE_M": config.GROUP_SIZE_M,
        "MUL_ROUTED_WEIGHT": launch.mul_routed_weight,
        "top_k": launch.top_k,
        "SWAP_AB": swap_ab,
    }
    ints = _integers(launch, block_shape)
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
    binaries land in Triton's cache. Returns the gate_up launch's CompiledKernel (both use the
    same tiles, so the same shared memory).

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
    bm = parsed.BLOCK_SIZE_M
    launches = (
        Launch(2 * N, K, launch_em(slots, E, bm, M, top_k, naive=naive), slots, top_k, False),
        Launch(K, N, launch_em(slots, E, bm, slots, 1, naive=naive), slots, 1, True),
    )
    specializations = [
        launch_specialization(
            parsed,
            launch,
            block_shape=block_shape,
            out_dtype=out_dtype,
            naive=naive,
            swap_ab=swap_ab,
        )
        for launch in launches
    ]
    kernel = fused_moe_fp8_block_kernel
    return [compile_specialized(kernel, spec, arch, parsed) for spec in specializations][0]
