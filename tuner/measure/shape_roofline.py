"""The roofline figures of one timed call of any kernel family's shape: the family says which
block-FP8 GEMM a call is (`FamilyReport.roofline_gemm`), `tuner.measure.roofline` counts it."""

from __future__ import annotations

from collections.abc import Mapping

from tuner.kernels.registry import get_family
from tuner.kernels.shape import FamilyShape
from tuner.measure.roofline import Roofline, roofline


def shape_roofline(
    key: FamilyShape,
    M: int,
    latency_us: float,
    ceilings: Mapping[str, float] | None = None,
    *,
    out_dtype: str = "bfloat16",
) -> Roofline | None:
    """Achieved bandwidth and throughput of one call of a family's shape at M, against the
    device's ceilings.

    Args:
        key: the family and shape (N, K, block_shape, params).
        M: the batch size (rows of A).
        latency_us: the call's latency in microseconds.
        ceilings: as `tuner.measure.roofline.roofline` takes them.
        out_dtype: "bfloat16" or "float16".

    Returns:
        The figures, or None for a family without a roofline (`roofline_gemm` is None, e.g.
        the fused-MoE experts, whose traffic is not one GEMM's).

    Raises:
        ValueError: an unknown family, or a latency or size `roofline` refuses.
    """
    gemm = get_family(key.family).report.roofline_gemm
    if gemm is None:
        return None
    gemm_M, N, K = gemm(key.shape, M)
    # Per-tensor scales read as many bytes as one scale block of the whole weight [N, K].
    block_shape = key.shape.block_shape or (N, K)
    return roofline(
        gemm_M, N, K, latency_us, ceilings, block_shape=block_shape, out_dtype=out_dtype
    )
