"""The proof family's own Triton kernel: C [M, N] = (A [M, K] @ B [N, K]^T) * a_scale * b_scale,
A and B in FP8 (e4m3) with one scale each (per-tensor), in vLLM's six config keys. Written for
the tests: it shares nothing with the product's kernels."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from tuner.kernels.interpreter import fix_interpreter_index


@triton.jit
def scaled_gemm_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    a_scale_ptr,
    b_scale_ptr,
    M,
    N,
    K,
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr,
    GROUP_SIZE_M: tl.constexpr,
):
    pid = tl.program_id(axis=0)
    blocks_m = tl.cdiv(M, BLOCK_SIZE_M)
    blocks_n = tl.cdiv(N, BLOCK_SIZE_N)
    group = GROUP_SIZE_M * blocks_n
    first_m = (pid // group) * GROUP_SIZE_M
    size_m = min(blocks_m - first_m, GROUP_SIZE_M)
    pid_m = first_m + (pid % group) % size_m
    pid_n = (pid % group) // size_m
    rows = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    cols = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        ks = k * BLOCK_SIZE_K + tl.arange(0, BLOCK_SIZE_K)
        a = tl.load(
            a_ptr + rows[:, None] * K + ks[None, :],
            mask=(rows[:, None] < M) & (ks[None, :] < K),
            other=0.0,
        )
        b = tl.load(
            b_ptr + cols[None, :] * K + ks[:, None],
            mask=(cols[None, :] < N) & (ks[:, None] < K),
            other=0.0,
        )
        acc += tl.dot(a, b)
    c = (acc * tl.load(a_scale_ptr) * tl.load(b_scale_ptr)).to(c_ptr.dtype.element_ty)
    tl.store(
        c_ptr + rows[:, None] * N + cols[None, :],
        c,
        mask=(rows[:, None] < M) & (cols[None, :] < N),
    )


def scaled_gemm(
    A: torch.Tensor,
    B: torch.Tensor,
    a_scale: torch.Tensor,
    b_scale: torch.Tensor,
    config: dict[str, int],
    *,
    out: torch.Tensor | None = None,
    out_dtype: torch.dtype = torch.bfloat16,
) -> torch.Tensor:
    """One launch: (A [M, K] @ B [N, K]^T) * a_scale * b_scale (float32 tensors of one element)
    into `out` (a new [M, N] when None)."""
    fix_interpreter_index()
    (M, K), N = A.shape, B.shape[0]
    out = torch.empty(M, N, dtype=out_dtype, device=A.device) if out is None else out
    grid = (triton.cdiv(M, config["BLOCK_SIZE_M"]) * triton.cdiv(N, config["BLOCK_SIZE_N"]),)
    scaled_gemm_kernel[grid](A, B, out, a_scale, b_scale, M, N, K, **config)
    return out
