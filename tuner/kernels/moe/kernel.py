"""Fused-MoE W8A8 block-FP8 expert GEMM in Triton with the loop structure of vLLM 0.33.0's
`fused_moe_kernel` on its fp8_w8a8 block path, and its host wrapper."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import triton
import triton.language as tl

from tuner.kernels.config import KernelConfig
from tuner.kernels.interpreter import fix_interpreter_index
from tuner.kernels.moe.space import effective_block_k, uses_swap_ab, why_invalid


@triton.jit
def fused_moe_fp8_block_kernel(
    # Pointers to the matrices, their scales and the routing
    a_ptr,
    b_ptr,
    c_ptr,
    a_scale_ptr,
    b_scale_ptr,
    topk_weights_ptr,
    sorted_token_ids_ptr,
    expert_ids_ptr,
    num_tokens_post_padded_ptr,
    # Matrix dimensions
    N,
    K,
    EM,
    num_valid_tokens,
    # Strides: how far a pointer moves for one step along a dimension
    stride_am,
    stride_ak,
    stride_be,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    stride_asm,
    stride_ask,
    stride_bse,
    stride_bsk,
    stride_bsn,
    # Quantization group sizes: block_shape = [group_n, group_k]
    group_n: tl.constexpr,
    group_k: tl.constexpr,
    # One routed slot per program (no sorted_token_ids) instead of BLOCK_SIZE_M of them
    naive_block_assignment: tl.constexpr,
    # Meta-parameters
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr,
    GROUP_SIZE_M: tl.constexpr,
    MUL_ROUTED_WEIGHT: tl.constexpr,
    top_k: tl.constexpr,
    # Compute the tile transposed, C^T = B @ A^T (vLLM's choice for small tiles on sm90)
    SWAP_AB: tl.constexpr,
):
    """C[t] = (A[t // top_k] * As) @ (B[e] * Bs[e])^T for every routed slot t of expert e, one
    [BLOCK_SIZE_M, BLOCK_SIZE_N] tile of C per program; the rows of a tile are BLOCK_SIZE_M
    consecutive entries of sorted_token_ids, all routed to the same expert, or, with
    naive_block_assignment, only its first row is used: slot pid_m, of expert expert_ids[pid_m].

    Shapes:
        A (a_ptr): [num_valid_tokens // top_k, K] fp8 e4m3, one row per token.
        B (b_ptr): [E, N, K] fp8 e4m3, one weight per expert, read as [BLOCK_SIZE_K,
            BLOCK_SIZE_N] tiles of B[e]^T (stride_bk = B.stride(2), stride_bn = B.stride(1)).
        C (c_ptr): [num_valid_tokens, N] bf16 or fp16 (vLLM's [M, top_k, N] cache), row t =
            slot t of the flattened [M, top_k] routing.
        As (a_scale_ptr): [num_valid_tokens // top_k, ceil(K / group_k)] fp32.
        Bs (b_scale_ptr): [E, ceil(N / group_n), ceil(K / group_k)] fp32
            (stride_bsk = Bs.stride(2), stride_bsn = Bs.stride(1)).
        topk_weights (topk_weights_ptr): [num_valid_tokens] fp32, read when MUL_ROUTED_WEIGHT.
        sorted_token_ids: [EM'] int32, slots grouped by expert, each expert's run padded to a
            multiple of BLOCK_SIZE_M with num_valid_tokens (`tuner.kernels.moe.workload`); None
            (never read) with naive_block_assignment.
        expert_ids: [EM' / BLOCK_SIZE_M] int32, the expert of each BLOCK_SIZE_M block, or with
            naive_block_assignment [num_valid_tokens], the expert of each slot; -1 writes
            zeros (an expert on another rank; our alignment never gives it).
        num_tokens_post_padded: [1] int32, the padded length in use.

    BLOCK_SIZE_K must divide group_k (the wrapper clamps it to group_k as vLLM does). SWAP_AB
    computes each tile as B-tile @ A-tile^T into a [BLOCK_SIZE_N, BLOCK_SIZE_M] accumulator and
    transposes it before the epilogue: the same sums, another MMA shape.

    Argument names here -> vLLM 0.33.0 `fused_moe_kernel` (fused_moe/fused_moe.py): the same
    names and order for the pointers, dimensions, strides, group_n, group_k,
    naive_block_assignment and meta-parameters; vLLM's b_bias_ptr, stride_bbe, stride_bbn,
    SPLIT_K, compute_type, USE_TD and its use_*/per_channel_quant/HAS_BIAS switches are absent
    (this is only its fp8_w8a8 block path without bias; compute_type is C's type here).
    """
    # Map the 1-D program id to a tile of C, GROUP_SIZE_M tile-rows at a time (L2 reuse of B).
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(EM, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    # The tile's rows: its slots of sorted_token_ids, or one slot. Tiles past the padded length
    # have nothing to do. Slots are int64 from here on, so stride * slot cannot overflow.
    rows = tl.arange(0, BLOCK_SIZE_M).to(tl.int64)
    num_tokens_post_padded = tl.load(num_tokens_post_padded_ptr)
    if pid_m * BLOCK_SIZE_M >= num_tokens_post_padded:
        return
    if naive_block_assignment:
        offs_token = tl.where(rows == 0, pid_m, num_valid_tokens)
    else:
        offs_token = tl.load(sorted_token_ids_ptr + (pid_m * BLOCK_SIZE_M + rows))
    offs_token = offs_token.to(tl.int64)
    token_mask = offs_token < num_valid_tokens

    off_experts = tl.load(expert_ids_ptr + pid_m).to(tl.int64)
    # The C tile's pointers and mask are computed in each branch, not once before it: hoisted,
    # the compiled code differs from vLLM's (more integer instructions in vLLM's, registers
    # differing on some configs).
    if off_experts == -1:
        # An expert that is not on this rank: its slots are zero.
        zeros = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=c_ptr.dtype.element_ty)
        offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
        c_ptrs = c_ptr + stride_cm * offs_token[:, None] + stride_cn * offs_cn[None, :]
        c_mask = token_mask[:, None] & (offs_cn[None, :] < N)
        tl.store(c_ptrs, zeros, mask=c_mask)
        return

    # Columns wrap around N, so B loads need no N mask; the masked store drops the wrapped ones.
    # A rows are gathered by token: slot t reads row t // top_k. With SWAP_AB the tiles are
    # read transposed: A as [BLOCK_SIZE_K, BLOCK_SIZE_M], B as [BLOCK_SIZE_N, BLOCK_SIZE_K].
    offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N).to(tl.int64)) % N
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    if SWAP_AB:
        a_ptrs = a_ptr + (offs_k[:, None] * stride_ak + offs_token[None, :] // top_k * stride_am)
        b_ptrs = (b_ptr + off_experts * stride_be
                  + (offs_bn[:, None] * stride_bn + offs_k[None, :] * stride_bk))
    else:
        a_ptrs = a_ptr + (offs_token[:, None] // top_k * stride_am + offs_k[None, :] * stride_ak)
        b_ptrs = (b_ptr + off_experts * stride_be
                  + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn))

    # Scales: a row of As per token; a row of Bs[e] per group_n columns of C.
    a_scale_ptrs = a_scale_ptr + (offs_token // top_k) * stride_asm
    offs_bsn = offs_bn // group_n
    b_scale_ptrs = b_scale_ptr + off_experts * stride_bse + offs_bsn * stride_bsn

    if SWAP_AB:
        accumulator = tl.zeros((BLOCK_SIZE_N, BLOCK_SIZE_M), dtype=tl.float32)
    else:
        accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        # Padding slots and the K tail read as 0 and add nothing.
        if SWAP_AB:
            a = tl.load(a_ptrs, mask=(offs_k[:, None] < K - k * BLOCK_SIZE_K)
                        & token_mask[None, :], other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[None, :] < K - k * BLOCK_SIZE_K, other=0.0)
        else:
            a = tl.load(a_ptrs, mask=token_mask[:, None]
                        & (offs_k[None, :] < K - k * BLOCK_SIZE_K), other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_SIZE_K, other=0.0)
        # The K-group this tile lies in; one scale pair covers the whole tile.
        offs_ks = (k * BLOCK_SIZE_K) // group_k
        a_scale = tl.load(a_scale_ptrs + offs_ks * stride_ask, mask=token_mask, other=0.0)
        b_scale = tl.load(b_scale_ptrs + offs_ks * stride_bsk)
        if SWAP_AB:
            accumulator += tl.dot(b, a) * b_scale[:, None] * a_scale[None, :]
        else:
            accumulator += tl.dot(a, b) * a_scale[:, None] * b_scale[None, :]
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    if SWAP_AB:
        accumulator = tl.trans(accumulator, (1, 0))

    if MUL_ROUTED_WEIGHT:
        moe_weight = tl.load(topk_weights_ptr + offs_token, mask=token_mask, other=0)
        accumulator = accumulator * moe_weight[:, None]
    c = accumulator.to(c_ptr.dtype.element_ty)
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + stride_cm * offs_token[:, None] + stride_cn * offs_cn[None, :]
    c_mask = token_mask[:, None] & (offs_cn[None, :] < N)
    tl.store(c_ptrs, c, mask=c_mask)


def device_arch(device: torch.device) -> int | None:
    """The compute capability of a CUDA device as an int (90 for sm90); None for any other
    device (CPU tensors under Triton's interpreter, `meta`)."""
    if device.type != "cuda":
        return None
    major, minor = torch.cuda.get_device_capability(device)
    return major * 10 + minor


def invoke_moe_gemm(
    A: torch.Tensor,
    A_scale: torch.Tensor,
    B: torch.Tensor,
    B_scale: torch.Tensor,
    C: torch.Tensor,
    topk_weights: torch.Tensor | None,
    sorted_token_ids: torch.Tensor | None,
    expert_ids: torch.Tensor,
    num_tokens_post_padded: torch.Tensor,
    *,
    mul_routed_weight: bool,
    top_k: int,
    config: Mapping[str, object],
    block_shape: tuple[int, int] = (128, 128),
    arch: int | None = None,
    kernel: Any = None,
) -> torch.Tensor:
    """One expert GEMM of the fused MoE, launched as vLLM 0.33.0's
    `invoke_fused_moe_triton_kernel` launches its fp8_w8a8 block path.

    Launch rules taken from that function: EM = len(sorted_token_ids), cut to
    A.size(0) * top_k * BLOCK_SIZE_M when A has fewer rows than BLOCK_SIZE_M; without
    sorted_token_ids (naive assignment) EM = A.size(0) * top_k * BLOCK_SIZE_M and the kernel's
    naive_block_assignment is set; a 1-D grid of cdiv(EM, BLOCK_SIZE_M) * cdiv(N, BLOCK_SIZE_N)
    programs; BLOCK_SIZE_K = min(BLOCK_SIZE_K, min(block_shape)); SWAP_AB as
    `tuner.kernels.moe.space.uses_swap_ab` says for the GPU; num_warps and num_stages
    as launch options.

    Args:
        A: [T, K] float8_e4m3fn, T = tokens (gate_up GEMM, top_k = the model's) or routed slots
            (down GEMM, top_k = 1).
        A_scale: [T, ceil(K / group_k)] float32.
        B: [E, N, K] float8_e4m3fn expert weights.
        B_scale: [E, ceil(N / group_n), ceil(K / group_k)] float32.
        C: [T * top_k, N] (or [T, top_k, N]) bf16 or fp16, written at the routed slots.
        topk_weights: [T * top_k] (or [T, top_k]) float32; needed when mul_routed_weight.
        sorted_token_ids, expert_ids, num_tokens_post_padded: `moe_align_block_size` with
            block_size = the config's BLOCK_SIZE_M; or, for naive assignment
            (`tuner.kernels.moe.workload.MoeWorkload.alignment`), None, [T * top_k] int32 expert of
            each slot, and [T * top_k * BLOCK_SIZE_M].
        mul_routed_weight: multiply each slot by its routing weight (the down GEMM).
        top_k: slots per row of A.
        config: vLLM's keys (`KernelConfig.runnable`; SPLIT_K and AMD keys are ignored: vLLM
            runs SPLIT_K=1 whatever the file says).
        block_shape: [group_n, group_k].
        arch: the compute capability the launch is for (90 for sm90), which decides SWAP_AB;
            None for that of A's device (`device_arch`: none off CUDA).
        kernel: a JITFunction with `fused_moe_fp8_block_kernel`'s parameters to launch
            instead (a test's stand-in); None for `fused_moe_fp8_block_kernel`.

    Returns:
        C.

    Raises:
        ValueError: a config the kernel cannot run.
    """
    group_n, group_k = block_shape
    parsed = KernelConfig.runnable(config, block_shape, why_invalid)
    N, K = B.shape[1:]
    T = A.shape[0]
    naive = sorted_token_ids is None
    if T == 0:
        return C

    if sorted_token_ids is None:
        EM = T * top_k * parsed.BLOCK_SIZE_M
    else:
        EM = sorted_token_ids.shape[0]
        if T < parsed.BLOCK_SIZE_M:
            EM = min(EM, T * top_k * parsed.BLOCK_SIZE_M)
    C2 = C.view(T * top_k, N)
    grid = (triton.cdiv(EM, parsed.BLOCK_SIZE_M) * triton.cdiv(N, parsed.BLOCK_SIZE_N),)
    fix_interpreter_index()  # Triton < 3.8's interpreter under numpy >= 2.4 only
    launched = fused_moe_fp8_block_kernel if kernel is None else kernel
    launched[grid](
        A, B, C2, A_scale, B_scale,
        topk_weights if mul_routed_weight else A_scale,
        sorted_token_ids, expert_ids, num_tokens_post_padded,
        N, K, EM, T * top_k,
        A.stride(0), A.stride(1),
        B.stride(0), B.stride(2), B.stride(1),
        C2.stride(0), C2.stride(1),
        A_scale.stride(0), A_scale.stride(1),
        # One block of N: vLLM 0.33.0's invoke_fused_moe_triton_kernel passes stride_bsn 0
        # (every column reads scale row 0 either way; 0 and 1 specialize differently).
        B_scale.stride(0), B_scale.stride(2), B_scale.stride(1) if B_scale.size(1) > 1 else 0,
        group_n, group_k,
        naive_block_assignment=naive,
        BLOCK_SIZE_M=parsed.BLOCK_SIZE_M,
        BLOCK_SIZE_N=parsed.BLOCK_SIZE_N,
        BLOCK_SIZE_K=effective_block_k(parsed, block_shape),
        GROUP_SIZE_M=parsed.GROUP_SIZE_M,
        MUL_ROUTED_WEIGHT=mul_routed_weight,
        top_k=top_k,
        SWAP_AB=uses_swap_ab(parsed.BLOCK_SIZE_M, parsed.BLOCK_SIZE_N,
                             device_arch(A.device) if arch is None else arch),
        num_warps=parsed.num_warps,
        num_stages=parsed.num_stages,
    )
    return C
