"""Roofline figures of a GEMM call: bytes, flops, achieved GB/s and TFLOP/s against the device's
ceilings (copy bandwidth, FP8 matrix-product throughput) measured with torch. The figures are
pure arithmetic; the `measure_*` functions import torch (and triton on CUDA) when called."""

from __future__ import annotations

import math
import statistics
import time
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
    return Roofline(
        float(latency_us),
        nbytes,
        flops,
        gbps,
        tflops,
        intensity,
        None if copy_gbps is None else gbps / copy_gbps,
        None if mm_tflops is None else tflops / mm_tflops,
        ridge,
        bound,
        roofline_ratio,
    )


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


def median_ms(fn: Callable[[], object], device: str) -> float:
    """Median milliseconds of `fn`: `triton.testing.do_bench(fn, return_mode="median")` on CUDA
    (CUDA events, a 256 MB buffer cleared between calls, untimed); on the CPU one warm-up call
    then the median of CPU_REPS perf_counter-timed calls."""
    if device.startswith("cuda"):
        from triton.testing import do_bench

        return float(do_bench(fn, return_mode="median"))
    fn()
    samples = []
    for _ in range(CPU_REPS):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e3


def _timer(device: str, timer: Timer | None) -> Timer:
    if device != "cpu" and not device.startswith("cuda"):
        raise ValueError(f"device must be 'cuda', 'cuda:N' or 'cpu', got {device!r}")
    return timer or (lambda fn: median_ms(fn, device))


def measure_copy_gbps(
    nbytes: int | None = None, device: str = "cuda", *, timer: Timer | None = None
) -> float:
    """The copy ceiling in GB/s: one `dst.copy_(src)` of `nbytes` (GPU_COPY_BYTES or
    CPU_COPY_BYTES when None) timed on `device`, read plus write counted (2 * nbytes), as
    `gemm_bytes` counts.

    Raises:
        ValueError: a bad device.
    """
    import torch

    time_ms = _timer(device, timer)
    nbytes = nbytes or (CPU_COPY_BYTES if device == "cpu" else GPU_COPY_BYTES)
    src = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    return 2 * nbytes / (time_ms(lambda: dst.copy_(src)) * 1e-3) / 1e9


def fp8_mm_operands(M: int, N: int, K: int, device: str, *, seed: int = 0):
    """(a [M, K] e4m3 row-major, b [K, N] e4m3 column-major, scale_a, scale_b fp32 scalars), as
    `torch._scaled_mm` requires on CUDA (torch 2.11 and 2.13, `_check_scaled_mm_sizes` in
    torch/_meta_registrations.py); values uniform in [-1, 1) before the cast.

    Raises:
        ValueError: K or N not divisible by 16.
    """
    import torch

    if K % 16 or N % 16:
        raise ValueError(f"K and N must be divisible by 16 for torch._scaled_mm, got K={K}, N={N}")
    generator = torch.Generator(device="cpu").manual_seed(seed)
    a = (torch.rand(M, K, generator=generator) * 2 - 1).to(torch.float8_e4m3fn).to(device)
    b_nk = (torch.rand(N, K, generator=generator) * 2 - 1).to(torch.float8_e4m3fn).to(device)
    one = torch.ones((), dtype=torch.float32, device=device)
    return a, b_nk.t(), one, one.clone()


def measure_fp8_mm_tflops(
    M: int | None = None,
    N: int | None = None,
    K: int | None = None,
    device: str = "cuda",
    *,
    fast_accum: bool = True,
    timer: Timer | None = None,
) -> float:
    """The FP8 ceiling in TFLOP/s: torch's per-tensor-scaled e4m3 product with bf16 output,
    sizes GPU_MM_SIZE (CPU_MM_SIZE on the CPU) where None. `use_fast_accum` by default because
    Triton's FP8 `tl.dot` on sm90 also accumulates imprecisely (triton/backends/nvidia/
    compiler.py: max_num_imprecise_acc_default = 2**30 on capability 90).

    Raises:
        ValueError: a bad size or device.
    """
    import torch

    time_ms = _timer(device, timer)
    size = CPU_MM_SIZE if device == "cpu" else GPU_MM_SIZE
    M, N, K = (size if v is None else v for v in (M, N, K))
    a, b, scale_a, scale_b = fp8_mm_operands(M, N, K, device)
    ms = time_ms(
        lambda: torch._scaled_mm(
            a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16,
            use_fast_accum=fast_accum,
        )
    )  # fmt: skip
    return gemm_flops(M, N, K) / (ms * 1e-3) / 1e12


def measure_ceilings(device: str = "cuda", *, timer: Timer | None = None) -> dict[str, float]:
    """Both ceilings of `device` at its kind's default sizes, once per CUDA worker start; the
    store keeps them (db.repo.record_ceilings).

    Raises:
        ValueError: a bad device.
    """
    return {
        COPY_GBPS: measure_copy_gbps(device=device, timer=timer),
        FP8_MM_TFLOPS: measure_fp8_mm_tflops(device=device, timer=timer),
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
