"""Block-scaled W8A8 FP8 GEMM in Triton with vLLM's loop structure, its launcher and compiler."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import triton
import triton.language as tl

from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.space import why_invalid
from tuner.kernels.interpreter import fix_interpreter_index


@triton.jit
def w8a8_block_fp8_matmul_kernel(
    # Pointers to the matrices and their scales
    a_ptr,
    b_ptr,
    c_ptr,
    a_s_ptr,
    b_s_ptr,
    # Matrix dimensions
    M,
    N,
    K,
    # Quantization group sizes: block_shape = [group_n, group_k]
    group_n,
    group_k,
    # Strides: how far a pointer moves for one step along a dimension
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    stride_as_m,
    stride_as_k,
    stride_bs_k,
    stride_bs_n,
    # Meta-parameters
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr,
    GROUP_SIZE_M: tl.constexpr,
):
    """C = (A * As) @ (B * Bs)^T with block-wise FP8 scales, one [BLOCK_SIZE_M, BLOCK_SIZE_N] tile
    of C per program.

    Shapes:
        A (a_ptr): [M, K] fp8 e4m3, one activation row per token.
        B (b_ptr): [N, K] fp8 e4m3, the weight; read as [BLOCK_SIZE_K, BLOCK_SIZE_N] tiles of B^T,
            so the launcher passes stride_bk = B.stride(1) and stride_bn = B.stride(0).
        As (a_s_ptr): [M, ceil(K / group_k)] fp32, one scale per row and K-group.
        Bs (b_s_ptr): [ceil(N / group_n), ceil(K / group_k)] fp32, one scale per
            group_n x group_k block of B; stride_bs_k = Bs.stride(1), stride_bs_n = Bs.stride(0).
        C (c_ptr): [M, N] bf16 or fp16; the fp32 accumulator is cast to C's element type.

    BLOCK_SIZE_K must divide group_k: each K-tile reads one column of As and Bs.

    Argument names here -> vLLM 0.33.0 `_w8a8_triton_block_scaled_mm`:
        a_ptr, b_ptr, c_ptr, a_s_ptr, b_s_ptr -> A, B, C, As, Bs
        M, N, K, group_n, group_k -> same names
        stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn -> same names
        stride_as_m, stride_as_k, stride_bs_k, stride_bs_n
            -> stride_As_m, stride_As_k, stride_Bs_k, stride_Bs_n
        BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K, GROUP_SIZE_M -> same names
    The arguments come in vLLM's order, so integer specialization matches too.
    """
    # Map the 1-D program id to a tile of C. Programs are ordered in groups of GROUP_SIZE_M
    # tile-rows so that neighbouring programs share B tiles in L2 (Triton's matmul tutorial).
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + (pid % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    # Row and column offsets wrap around M and N, so loads need no M or N mask; the rows and
    # columns that wrapped are computed twice and dropped by the masked store.
    offs_am = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
    offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)

    # Scales: a row of As per row of A; a row of Bs per group_n columns of C.
    a_s_ptrs = a_s_ptr + offs_am * stride_as_m
    offs_bs_n = offs_bn // group_n
    b_s_ptrs = b_s_ptr + offs_bs_n * stride_bs_n

    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        # Mask the K tail only; elements past K read as 0 and add nothing.
        k_left = K - k * BLOCK_SIZE_K
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        # The K-group this tile lies in; one scale pair covers the whole tile.
        offs_ks = (k * BLOCK_SIZE_K) // group_k
        a_s = tl.load(a_s_ptrs + offs_ks * stride_as_k)
        b_s = tl.load(b_s_ptrs + offs_ks * stride_bs_k)
        accumulator += tl.dot(a, b) * a_s[:, None] * b_s[None, :]
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk

    c = accumulator.to(c_ptr.dtype.element_ty)

    # Write back without wrapping; rows >= M and columns >= N are masked out.
    offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptrs, c, mask=c_mask)


def w8a8_block_fp8_matmul(
    A: torch.Tensor,
    B: torch.Tensor,
    As: torch.Tensor,
    Bs: torch.Tensor,
    block_shape: tuple[int, int] | list[int],
    config: Mapping[str, int],
    out_dtype: torch.dtype = torch.bfloat16,
    out: torch.Tensor | None = None,
    kernel: Any = None,
) -> torch.Tensor:
    """Run the block-FP8 GEMM C = (A * As) @ (B * Bs)^T with one launch config.

    Launch as vLLM 0.33.0 does (`w8a8_triton_block_scaled_mm`): M = A.numel() // K, a 1-D grid of
    cdiv(M, BLOCK_SIZE_M) * cdiv(N, BLOCK_SIZE_N) programs, num_warps and num_stages as launch
    options.

    Args:
        A: [..., K] float8_e4m3fn activations, contiguous (the workloads make them so; the
            float64 reference check catches a launch that reads them wrong).
        B: [N, K] float8_e4m3fn weight, contiguous.
        As: [..., ceil(K / group_k)] float32 activation scales (leading dims as A's), contiguous.
        Bs: [ceil(N / group_n), ceil(K / group_k)] float32 weight scales, contiguous.
        block_shape: [group_n, group_k] of the weight scales, e.g. [128, 128].
        config: vLLM's keys BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K, GROUP_SIZE_M, num_warps,
            num_stages (a `KernelConfig.as_dict()`); other keys are ignored.
        out_dtype: torch.bfloat16 (what serving uses) or torch.float16.
        out: optional contiguous [..., N] tensor of out_dtype to write into (e.g. pre-filled
            with NaN to detect elements the kernel did not write); allocated if None.
        kernel: a JITFunction with the kernel's parameters to launch instead (a
            `tuner.kernels.target.Capture` records the launch); None for the builtin kernel.

    Returns:
        C: [..., N] of out_dtype (`out` itself if given).

    Raises:
        ValueError: a config the kernel cannot run.
    """
    group_n, group_k = block_shape
    parsed = KernelConfig.runnable(config, (group_n, group_k), why_invalid)
    N, K = B.shape
    M = A.numel() // K
    if out is None:
        out = torch.empty((*A.shape[:-1], N), dtype=out_dtype, device=A.device)
    if M == 0:
        return out

    A2 = A.view(M, K)
    As2 = As.view(M, As.shape[-1])
    C2 = out.view(M, N)
    grid = (triton.cdiv(M, parsed.BLOCK_SIZE_M) * triton.cdiv(N, parsed.BLOCK_SIZE_N),)
    fix_interpreter_index()  # Triton < 3.8's interpreter under numpy >= 2.4 only
    launched = w8a8_block_fp8_matmul_kernel if kernel is None else kernel
    launched[grid](
        A2, B, C2, As2, Bs,
        M, N, K,
        group_n, group_k,
        A2.stride(0), A2.stride(1),
        B.stride(1), B.stride(0),
        C2.stride(0), C2.stride(1),
        As2.stride(0), As2.stride(1),
        Bs.stride(1), Bs.stride(0),
        **parsed.as_dict(),
    )
    return out


