"""The error measure that gates every family's results against its float64 reference."""

from __future__ import annotations

import math

import torch


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Relative Frobenius error ||out - ref||_F / ||ref||_F, computed in float64.

    Args:
        out: the kernel's output, [M, N] or [..., N] with as many elements as ref.
        ref: [M, N] float64 reference (a workload's `reference()`).

    Returns:
        The error (dimensionless); inf if out holds any NaN or inf, or if ref is all zeros and
        out is not.

    Raises:
        ValueError: out and ref differ in number of elements.
    """
    if out.numel() != ref.numel():
        raise ValueError(f"out {list(out.shape)} and ref {list(ref.shape)} differ in size")
    diff_out = out.reshape(ref.shape).to(device=ref.device, dtype=torch.float64)
    if not bool(torch.isfinite(diff_out).all()):
        return math.inf
    ref64 = ref.double()
    ref_norm = float(torch.linalg.vector_norm(ref64))
    err_norm = float(torch.linalg.vector_norm(diff_out - ref64))
    if ref_norm == 0.0:
        return 0.0 if err_norm == 0.0 else math.inf
    return err_norm / ref_norm
