"""Inputs and float64 reference for the block-FP8 GEMM, and the error measure that gates results."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

# Largest finite float8_e4m3fn value: torch.finfo(torch.float8_e4m3fn).max.
FP8_MAX = 448.0

# Scales are drawn uniform in [SCALE_LOW, SCALE_HIGH). See make_inputs for why.
SCALE_LOW = 1e-3
SCALE_HIGH = 4e-3


@dataclass(frozen=True)
class BlockFp8Inputs:
    """One problem for the block-FP8 GEMM.

    Attributes:
        A: [M, K] float8_e4m3fn activations.
        B: [N, K] float8_e4m3fn weight.
        As: [M, ceil(K / group_k)] float32 activation scales.
        Bs: [ceil(N / group_n), ceil(K / group_k)] float32 weight scales.
    """

    A: torch.Tensor
    B: torch.Tensor
    As: torch.Tensor
    Bs: torch.Tensor


def make_inputs(
    M: int,
    N: int,
    K: int,
    block_shape: tuple[int, int] = (128, 128),
    *,
    seed: int,
    device: str | torch.device = "cpu",
) -> BlockFp8Inputs:
    """Draw random inputs for an M x N x K block-FP8 GEMM, the same on every device.

    A and B are drawn as vLLM's tuning script draws them (benchmarks/kernels/
    benchmark_w8a8_block_fp8.py, vLLM 0.33.0): uniform in [-448, 448], 448 being the largest
    float8_e4m3fn value, then cast to e4m3.

    The scales differ from vLLM's uniform [0, 0.01): they are uniform in [1e-3, 4e-3). Each term
    of an output is at most 448^2 * 4e-3^2 = 3.2 in magnitude, so for K up to 18432 (the largest
    K in vLLM's DeepSeek-V3 shapes) even the worst-case sum stays below 18432 * 3.2 = 59,000,
    inside fp16's largest finite value 65,504 and far inside bf16's (3.4e38). Typical outputs
    (random signs, about sqrt(K) * 448^2 / 3 * 2.5e-3^2 in size: 3 at K=64, 57 at K=18432) sit
    far above fp16's smallest normal 6.1e-5, so the output's rounding is relative, not absolute.
    The lower bound keeps every scale well away from zero, so no row or block of the output
    vanishes and hides an error.

    Everything is drawn on the CPU from a torch.Generator seeded with `seed`, in the order A, B,
    As, Bs, and then moved to `device`.

    Args:
        M: rows of A and of the output (tokens).
        N: rows of B, columns of the output.
        K: the reduction dimension.
        block_shape: [group_n, group_k] of the weight scales.
        seed: seed of the generator.
        device: where the returned tensors live.

    Returns:
        BlockFp8Inputs with A [M, K], B [N, K], As [M, ceil(K/group_k)],
        Bs [ceil(N/group_n), ceil(K/group_k)].

    Raises:
        ValueError: a dimension is negative or a group size is not positive.
    """
    group_n, group_k = block_shape
    if min(M, N, K) < 0 or group_n <= 0 or group_k <= 0:
        raise ValueError(f"bad problem M={M} N={N} K={K} block_shape={list(block_shape)}")
    generator = torch.Generator(device="cpu").manual_seed(seed)
    k_groups = math.ceil(K / group_k)
    n_groups = math.ceil(N / group_n)

    def fp8(rows: int, cols: int) -> torch.Tensor:
        values = (torch.rand(rows, cols, generator=generator) * 2 - 1) * FP8_MAX
        return values.clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)

    def scales(rows: int, cols: int) -> torch.Tensor:
        unit = torch.rand(rows, cols, generator=generator, dtype=torch.float32)
        return SCALE_LOW + unit * (SCALE_HIGH - SCALE_LOW)

    A = fp8(M, K)
    B = fp8(N, K)
    As = scales(M, k_groups)
    Bs = scales(n_groups, k_groups)
    return BlockFp8Inputs(A=A.to(device), B=B.to(device), As=As.to(device), Bs=Bs.to(device))


def dequantize(
    values: torch.Tensor, scales: torch.Tensor, group_shape: tuple[int, int]
) -> torch.Tensor:
    """Multiply each group_shape block of values by its scale, in float64.

    Args:
        values: [R, C] float8_e4m3fn (any dtype that converts to float64).
        scales: [ceil(R / group_rows), ceil(C / group_cols)], one scale per block.
        group_shape: (group_rows, group_cols); partial blocks at the ends use their block's scale.

    Returns:
        [R, C] float64.
    """
    rows, cols = values.shape
    group_rows, group_cols = group_shape
    expanded = scales.double().repeat_interleave(group_rows, dim=0)[:rows]
    expanded = expanded.repeat_interleave(group_cols, dim=1)[:, :cols]
    return values.double() * expanded


def reference_matmul(inputs: BlockFp8Inputs, block_shape: tuple[int, int]) -> torch.Tensor:
    """The exact result the block-FP8 GEMM approximates: dequantize, then multiply in float64.

    C[m, n] = sum_k A[m, k] * As[m, k // group_k] * B[n, k] * Bs[n // group_n, k // group_k].

    Args:
        inputs: A [..., K], B [N, K], As [..., ceil(K/group_k)], Bs [ceil(N/group_n),
            ceil(K/group_k)]; N and K need not be multiples of the group sizes.
        block_shape: [group_n, group_k] of the weight scales.

    Returns:
        [M, N] float64 on the inputs' device, M = A.numel() // K.
    """
    group_n, group_k = block_shape
    N, K = inputs.B.shape
    a = dequantize(
        inputs.A.reshape(-1, K), inputs.As.reshape(-1, inputs.As.shape[-1]), (1, group_k)
    )
    b = dequantize(inputs.B, inputs.Bs, (group_n, group_k))
    return a @ b.T
