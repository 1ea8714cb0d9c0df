"""Roofline figures of a GEMM call: bytes, flops, achieved GB/s and TFLOP/s against the device's
ceilings (copy bandwidth, FP8 matrix-product throughput) measured with torch. The figures are
pure arithmetic; `measure_ceilings` imports torch (and triton on CUDA) when called."""

from __future__ import annotations

import math
import statistics
import timeit
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tuner.kernels.registry import get_family
from tuner.kernels.shape import FamilyShape

# Bytes per element of C for the output dtypes the kernel writes.
OUT_BYTES: dict[str, int] = {"bfloat16": 2, "float16": 2}
# Keys of a ceilings mapping, as measure_ceilings returns them and the store keeps them.
COPY_GBPS, FP8_MM_TFLOPS = "copy_gbps", "fp8_mm_tflops"
# Ceiling sizes on a GPU: a 1 GiB copy (far above any L2), an 8192^3 FP8 product (fills an
# H200's 132 SMs); on the CPU (interpreter workers, tests) sizes that take milliseconds.
GPU_COPY_BYTES, GPU_MM_SIZE = 1 << 30, 8192
CPU_COPY_BYTES, CPU_MM_SIZE = 1 << 24, 256
CPU_REPS = 5  # timed calls per CPU measurement, after one untimed warm-up call

# A timer takes a no-argument callable and returns its median run time in milliseconds.
Timer = Callable[[Callable[[], object]], float]


def gemm_bytes(
    M: int, N: int, K: int, block_shape: tuple[int, int] = (128, 128), out_dtype: str = "bfloat16"
) -> int:
    """Compulsory traffic of one block-FP8 GEMM call in bytes, each operand counted once: A
    [M, K] and B [N, K] fp8, As [M, ceil(K/group_k)] and Bs [ceil(N/group_n), ceil(K/group_k)]
    fp32, C [M, N] in `out_dtype`. A lower bound: L2 absorbs most tile re-reads.

    Raises:
        KeyError: an unknown out_dtype.
    """
    group_n, group_k = block_shape
    k_groups = math.ceil(K / group_k)
    scales = 4 * (M + math.ceil(N / group_n)) * k_groups
    return M * K + N * K + scales + OUT_BYTES[out_dtype] * M * N


def gemm_flops(M: int, N: int, K: int) -> int:
    """2 * M * N * K: the flops of C [M, N] = A [M, K] B [N, K]^T (scaling not counted)."""
    return 2 * M * N * K


@dataclass(frozen=True)
class Roofline:
    """Where one timed GEMM call sits against the device's ceilings.

    Attributes:
        latency_us: the call's latency in microseconds.
        bytes: compulsory traffic (`gemm_bytes`); flops: 2 * M * N * K.
        gbps: bytes / latency in GB/s; tflops: flops / latency in TFLOP/s.
        intensity: flops per byte.
        copy_ratio: gbps over the copy ceiling; None without it.
        fp8_mm_ratio: tflops over the FP8 matrix-product ceiling; None without it.
        ridge_intensity: flops per byte where the two ceilings meet; None without both.
        bound: "memory" below the ridge, else "compute"; None without both.
        roofline_ratio: tflops / min(FP8 ceiling, intensity * copy ceiling); None without both.
    """

    latency_us: float
    bytes: int
    flops: int
    gbps: float
    tflops: float
    intensity: float
    copy_ratio: float | None
    fp8_mm_ratio: float | None
    ridge_intensity: float | None
    bound: str | None
    roofline_ratio: float | None


def _positive(name: str, value: float | None) -> float | None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return value


def roofline(
    M: int,
    N: int,
    K: int,
    latency_us: float,
    ceilings: Mapping[str, float] | None = None,
    *,
    block_shape: tuple[int, int] = (128, 128),
    out_dtype: str = "bfloat16",
) -> Roofline:
    """Achieved bandwidth and throughput of one call [M, K] x [N, K] taking `latency_us`, and
    their ratios to `ceilings` ({"copy_gbps", "fp8_mm_tflops"} measured on the same device by
    `measure_ceilings`; either may be absent, other keys are ignored).

    Raises:
        ValueError: a latency or ceiling that is not a positive finite number.
    """
    _positive("latency_us", latency_us)
    nbytes, flops = gemm_bytes(M, N, K, block_shape, out_dtype), gemm_flops(M, N, K)
    gbps, tflops = nbytes / latency_us / 1e3, flops / latency_us / 1e6
    intensity = flops / nbytes
    copy_gbps = _positive(COPY_GBPS, (ceilings or {}).get(COPY_GBPS))
    mm_tflops = _positive(FP8_MM_TFLOPS, (ceilings or {}).get(FP8_MM_TFLOPS))
    ridge = bound = roofline_ratio = None
    if copy_gbps is not None and mm_tflops is not None:
        ridge = mm_tflops * 1e3 / copy_gbps  # (TFLOP/s * 1e12) / (GB/s * 1e9)
        bound = "memory" if intensity < ridge else "compute"
        roofline_ratio = tflops / min(mm_tflops, intensity * copy_gbps / 1e3)
    copy_ratio = None if copy_gbps is None else gbps / copy_gbps
    mm_ratio = None if mm_tflops is None else tflops / mm_tflops
    figures = (nbytes, flops, gbps, tflops, intensity, copy_ratio, mm_ratio, ridge, bound)
    return Roofline(float(latency_us), *figures, roofline_ratio)


def shape_roofline(
    key: FamilyShape,
    M: int,
    latency_us: float,
    ceilings: Mapping[str, float] | None = None,
    *,
    out_dtype: str = "bfloat16",
) -> Roofline | None:
    """`roofline` of one call of a family's shape at M: the family says which GEMM a call is
    (`FamilyReport.roofline_gemm`); None for a family without one (fused-MoE experts).

    Raises:
        ValueError: an unknown family, or a latency or ceiling `roofline` refuses.
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


def _median_ms(fn: Callable[[], object], device: str) -> float:
    """Median milliseconds of `fn`: `triton.testing.do_bench(fn, return_mode="median")` on CUDA
    (CUDA events, a 256 MB buffer cleared between calls, untimed); on the CPU the median of
    CPU_REPS calls after one untimed warm-up call (`timeit.repeat`)."""
    if device == "cuda":
        from triton.testing import do_bench

        return float(do_bench(fn, return_mode="median"))
    return statistics.median(timeit.repeat(fn, number=1, repeat=CPU_REPS + 1)[1:]) * 1e3


def measure_ceilings(device: str = "cuda", *, timer: Timer | None = None) -> dict[str, float]:
    """Both ceilings of `device` ("cuda" or "cpu"), once per CUDA worker start; the store keeps
    them (db.repo.record_ceilings).

    - copy_gbps: one `dst.copy_(src)` of GPU_COPY_BYTES (CPU_COPY_BYTES on the CPU), read plus
      write counted (2 * bytes), as `gemm_bytes` counts.
    - fp8_mm_tflops: torch's per-tensor-scaled e4m3 product at GPU_MM_SIZE^3 (CPU_MM_SIZE^3),
      bf16 out, b [K, N] column-major as `torch._scaled_mm` requires on CUDA; `use_fast_accum`
      because Triton's FP8 `tl.dot` on sm90 also accumulates imprecisely
      (triton/backends/nvidia/compiler.py: max_num_imprecise_acc_default = 2**30 on 90).

    Args:
        timer: a callable's median milliseconds; `do_bench` on CUDA, a wall clock on the CPU.

    Raises:
        ValueError: a device other than "cuda" or "cpu".
    """
    import torch

    if device not in ("cuda", "cpu"):
        raise ValueError(f"device must be 'cuda' or 'cpu', got {device!r}")
    time_ms = timer or (lambda fn: _median_ms(fn, device))
    nbytes, size = (
        (CPU_COPY_BYTES, CPU_MM_SIZE) if device == "cpu" else (GPU_COPY_BYTES, GPU_MM_SIZE)
    )
    src = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    copy_ms = time_ms(lambda: dst.copy_(src))
    generator = torch.Generator(device="cpu").manual_seed(0)
    a, b = (
        (torch.rand(size, size, generator=generator) * 2 - 1).to(torch.float8_e4m3fn).to(device)
        for _ in range(2)
    )
    one = torch.ones((), dtype=torch.float32, device=device)
    mm_ms = time_ms(
        lambda: torch._scaled_mm(
            a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=True
        )
    )
    return {
        COPY_GBPS: 2 * nbytes / copy_ms / 1e6,
        FP8_MM_TFLOPS: gemm_flops(size, size, size) / mm_ms / 1e9,
    }


def ceiling_details(device: str = "cuda") -> dict[str, str]:
    """How `measure_ceilings(device)` measures each ceiling, one line each, stored with them."""
    cpu = device == "cpu"
    nbytes, size = (CPU_COPY_BYTES, CPU_MM_SIZE) if cpu else (GPU_COPY_BYTES, GPU_MM_SIZE)
    timing = (
        f"median of {CPU_REPS} perf_counter calls" if cpu else "median of triton.testing.do_bench"
    )
    return {
        COPY_GBPS: f"dst.copy_(src) of {nbytes} bytes on {device}, read plus write counted; "
        f"{timing}",
        FP8_MM_TFLOPS: f"torch._scaled_mm {size}x{size}x{size} e4m3, per-tensor scales, bf16 "
        f"out, use_fast_accum=True on {device}; {timing}",
    }
