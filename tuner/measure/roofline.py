"""Roofline figures of a GEMM call: its compulsory bytes and flops, and the GB/s and TFLOP/s a
latency achieves. Pure arithmetic: no torch."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tuner.kernels.registry import get_family
from tuner.kernels.shape import FamilyShape

# Bytes per element of C for the output dtypes the kernel writes.
OUT_BYTES: dict[str, int] = {"bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class Roofline:
    """What one timed GEMM call achieves.

    Attributes:
        bytes: compulsory traffic of the call, each operand counted once: A [M, K] and B [N, K]
            fp8, As [M, ceil(K/group_k)] and Bs [ceil(N/group_n), ceil(K/group_k)] fp32, C
            [M, N] in the output dtype. A lower bound: L2 absorbs most tile re-reads.
        flops: 2 * M * N * K (scaling not counted).
        gbps: bytes / latency in GB/s; tflops: flops / latency in TFLOP/s.
    """

    bytes: int
    flops: int
    gbps: float
    tflops: float


def roofline(
    M: int,
    N: int,
    K: int,
    latency_us: float,
    *,
    block_shape: tuple[int, int] = (128, 128),
    out_dtype: str = "bfloat16",
) -> Roofline:
    """Bytes, flops and the achieved GB/s and TFLOP/s of one call [M, K] x [N, K] taking
    `latency_us` microseconds.

    Raises:
        ValueError: a latency that is not a positive finite number.
        KeyError: an unknown out_dtype.
    """
    if not (math.isfinite(latency_us) and latency_us > 0):
        raise ValueError(f"latency_us must be a positive finite number, got {latency_us!r}")
    group_n, group_k = block_shape
    scales = 4 * (M + math.ceil(N / group_n)) * math.ceil(K / group_k)
    nbytes = M * K + N * K + scales + OUT_BYTES[out_dtype] * M * N
    flops = 2 * M * N * K
    return Roofline(nbytes, flops, nbytes / latency_us / 1e3, flops / latency_us / 1e6)


def shape_roofline(
    key: FamilyShape, M: int, latency_us: float, *, out_dtype: str = "bfloat16"
) -> Roofline | None:
    """`roofline` of one call of a family's shape at M: the family says which GEMM a call is
    (`FamilyReport.roofline_gemm`); None for a family without one (fused-MoE experts).

    Raises:
        ValueError: an unknown family, or a latency `roofline` refuses.
    """
    gemm = get_family(key.family).report.roofline_gemm
    if gemm is None:
        return None
    gemm_M, N, K = gemm(key.shape, M)
    # Per-tensor scales read as many bytes as one scale block of the whole weight [N, K].
    block_shape = key.shape.block_shape or (N, K)
    return roofline(gemm_M, N, K, latency_us, block_shape=block_shape, out_dtype=out_dtype)
