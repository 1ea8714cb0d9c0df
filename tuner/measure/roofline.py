"""Roofline figures of a GEMM call: bytes, flops, achieved GB/s and TFLOP/s, and the device's
ceilings (copy bandwidth, FP8 matrix-product throughput) measured with torch.

The counting helpers and `roofline` are pure (no torch); the `measure_*` functions import torch
(and triton on CUDA) when called.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

# Bytes per element of C for the output dtypes the kernel writes (bfloat16, float16).
OUT_BYTES: dict[str, int] = {"bfloat16": 2, "float16": 2}
# Keys of a ceilings mapping, as measure_ceilings returns them and the store keeps them.
COPY_GBPS, FP8_MM_TFLOPS = "copy_gbps", "fp8_mm_tflops"
CEILING_KEYS: tuple[str, ...] = (COPY_GBPS, FP8_MM_TFLOPS)
# Default sizes of the ceiling measurements on a GPU: a 1 GiB copy (far above any L2), an
# 8192^3 FP8 product (about 1.1e12 flops, big enough to fill an H200's 132 SMs).
GPU_COPY_BYTES = 1 << 30
GPU_MM_SIZE = 8192
# On the CPU (interpreter workers, tests): sizes that take milliseconds, not minutes.
CPU_COPY_BYTES = 1 << 24
CPU_MM_SIZE = 256
CPU_REPS = 5  # timed calls per CPU measurement, after one untimed warm-up call

# A timer takes a no-argument callable and returns its median run time in milliseconds.
Timer = Callable[[Callable[[], object]], float]


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def gemm_bytes(
    M: int,
    N: int,
    K: int,
    block_shape: tuple[int, int] = (128, 128),
    out_dtype: str = "bfloat16",
) -> int:
    """Compulsory memory traffic of one block-FP8 GEMM call, in bytes.

    Each operand is counted once, as if read (or written) exactly once: A [M, K] fp8 (1 byte),
    B [N, K] fp8, As [M, ceil(K/group_k)] fp32, Bs [ceil(N/group_n), ceil(K/group_k)] fp32,
    and C [M, N] written in the output dtype (2 bytes for bf16 and fp16). This is a lower bound:
    the kernel re-reads tiles of A and B across programs, which L2 mostly absorbs.

    Args:
        M: rows of A [M, K].
        N: rows of B [N, K].
        K: the reduction size.
        block_shape: [group_n, group_k] of the scales.
        out_dtype: "bfloat16" or "float16".

    Returns:
        The byte count; divided by latency_us and by 1e3 it is GB/s.

    Raises:
        ValueError: a non-positive size or block, or an unknown out_dtype.
    """
    for name, value in (
        ("M", M),
        ("N", N),
        ("K", K),
        ("group_n", block_shape[0]),
        ("group_k", block_shape[1]),
    ):
        _positive_int(name, value)
    if out_dtype not in OUT_BYTES:
        raise ValueError(f"out_dtype must be one of {', '.join(OUT_BYTES)}, got {out_dtype!r}")
    group_n, group_k = block_shape
    k_groups = math.ceil(K / group_k)
    return (
        M * K
        + N * K
        + 4 * M * k_groups
        + 4 * math.ceil(N / group_n) * k_groups
        + OUT_BYTES[out_dtype] * M * N
    )


def gemm_flops(M: int, N: int, K: int) -> int:
    """Floating-point operations of C [M, N] = A [M, K] B [N, K]^T: 2 * M * N * K.

    Scale multiplications (one per output element and K-tile) are not counted.

    Args:
        M: rows of A [M, K].
        N: rows of B [N, K].
        K: the reduction size.

    Returns:
        The count; divided by latency_us and by 1e6 it is TFLOP/s.

    Raises:
        ValueError: a non-positive size.
    """
    for name, value in (("M", M), ("N", N), ("K", K)):
        _positive_int(name, value)
    return 2 * M * N * K


@dataclass(frozen=True)
class Roofline:
    """Where one timed GEMM call sits against the device's ceilings.

    Attributes:
        latency_us: the call's latency in microseconds.
        bytes: compulsory traffic (`gemm_bytes`).
        flops: 2 * M * N * K.
        gbps: achieved bandwidth, bytes / latency, in GB/s (1e9 bytes per second).
        tflops: achieved throughput, flops / latency, in TFLOP/s (1e12 per second).
        intensity: arithmetic intensity, flops per byte.
        copy_ratio: gbps / the copy ceiling (1.0: as fast as a device-to-device copy); None
            without that ceiling.
        fp8_mm_ratio: tflops / the FP8 matrix-product ceiling; None without it.
        ridge_intensity: flops per byte where the two ceilings meet; None without both.
        bound: "memory" when intensity is below the ridge, else "compute"; None without both.
        roofline_ratio: tflops / min(FP8 ceiling, intensity * copy ceiling), the fraction of
            what the roofline allows at this intensity; None without both.
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


def _ceiling(ceilings: Mapping[str, float], key: str) -> float | None:
    value = ceilings.get(key)
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not (math.isfinite(value) and value > 0)
    ):
        raise ValueError(f"ceiling {key} must be a positive finite number, got {value!r}")
    return float(value)


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
    """Achieved bandwidth and throughput of one call, and their ratios to the ceilings.

    Args:
        M: rows of A [M, K].
        N: rows of B [N, K].
        K: the reduction size.
        latency_us: the call's latency in microseconds.
        ceilings: {"copy_gbps": GB/s, "fp8_mm_tflops": TFLOP/s} measured on the same device
            (`measure_ceilings`); either key may be absent; other keys are ignored.
        block_shape: [group_n, group_k] of the scales.
        out_dtype: "bfloat16" or "float16".

    Returns:
        The figures; ratios and bound are None where a ceiling is missing.

    Raises:
        ValueError: latency_us not positive and finite, a bad size, or a ceiling that is not a
            positive finite number.
    """
    if (
        isinstance(latency_us, bool)
        or not isinstance(latency_us, int | float)
        or not (math.isfinite(latency_us) and latency_us > 0)
    ):
        raise ValueError(f"latency_us must be a positive finite number, got {latency_us!r}")
    nbytes = gemm_bytes(M, N, K, block_shape, out_dtype)
    flops = gemm_flops(M, N, K)
    gbps = nbytes / latency_us / 1e3
    tflops = flops / latency_us / 1e6
    intensity = flops / nbytes
    copy_gbps = _ceiling(ceilings or {}, COPY_GBPS)
    mm_tflops = _ceiling(ceilings or {}, FP8_MM_TFLOPS)
    ridge = bound = roofline_ratio = None
    if copy_gbps is not None and mm_tflops is not None:
        ridge = mm_tflops * 1e3 / copy_gbps  # (TFLOP/s * 1e12) / (GB/s * 1e9)
        bound = "memory" if intensity < ridge else "compute"
        roofline_ratio = tflops / min(mm_tflops, intensity * copy_gbps / 1e3)
    return Roofline(
        latency_us=float(latency_us),
        bytes=nbytes,
        flops=flops,
        gbps=gbps,
        tflops=tflops,
        intensity=intensity,
        copy_ratio=None if copy_gbps is None else gbps / copy_gbps,
        fp8_mm_ratio=None if mm_tflops is None else tflops / mm_tflops,
        ridge_intensity=ridge,
        bound=bound,
        roofline_ratio=roofline_ratio,
    )


# ----- measurement (imports torch when called) -----


def median_ms(fn: Callable[[], object], device: str) -> float:
    """Median run time of `fn` in milliseconds.

    On CUDA: `triton.testing.do_bench(fn, return_mode="median")`, which times each call with CUDA
    events and clears a 256 MB buffer between calls (the clearing is not timed). On the CPU: one
    untimed warm-up call, then the median of `CPU_REPS` perf_counter-timed calls.

    Args:
        fn: the work to time; called many times.
        device: "cuda", "cuda:N" or "cpu".

    Returns:
        Milliseconds.
    """
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


def _check_device(device: str) -> None:
    if device != "cpu" and not device.startswith("cuda"):
        raise ValueError(f"device must be 'cuda', 'cuda:N' or 'cpu', got {device!r}")


def measure_copy_gbps(
    nbytes: int | None = None,
    device: str = "cuda",
    *,
    timer: Timer | None = None,
) -> float:
    """The device-to-device copy ceiling: one `dst.copy_(src)` of `nbytes` bytes, timed.

    Counted as read plus write: 2 * nbytes per copy, the same convention as `gemm_bytes`
    (bytes read from plus written to memory).

    Args:
        nbytes: bytes of the source buffer; None for GPU_COPY_BYTES on CUDA, CPU_COPY_BYTES on
            the CPU.
        device: "cuda", "cuda:N" or "cpu".
        timer: median milliseconds of a callable; default `median_ms` on `device`.

    Returns:
        GB/s (1e9 bytes per second), read plus write.

    Raises:
        ValueError: a bad size or device.
    """
    import torch

    _check_device(device)
    if nbytes is None:
        nbytes = CPU_COPY_BYTES if device == "cpu" else GPU_COPY_BYTES
    _positive_int("nbytes", nbytes)
    src = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    ms = (timer or (lambda fn: median_ms(fn, device)))(lambda: dst.copy_(src))
    return 2 * nbytes / (ms * 1e-3) / 1e9


def fp8_mm_operands(M: int, N: int, K: int, device: str, *, seed: int = 0):
    """Operands of torch's per-tensor-scaled FP8 product, laid out as torch requires.

    `torch._scaled_mm(a, b, scale_a=, scale_b=, out_dtype=)` (torch 2.11 and 2.13: the same
    schema, aten/src/ATen/native/native_functions.yaml) needs on CUDA `a` row-major and `b`
    column-major, with K and N divisible by 16 (torch/_meta_registrations.py,
    `_check_scaled_mm_sizes`); per-tensor scales are float32 scalars.

    Args:
        M: rows of a [M, K].
        N: columns of b [K, N].
        K: the reduction size.
        device: where to put them.
        seed: seed of the values (uniform in [-1, 1) before the e4m3 cast).

    Returns:
        (a [M, K] e4m3 row-major, b [K, N] e4m3 column-major, scale_a, scale_b fp32 scalars).

    Raises:
        ValueError: a non-positive size, or K or N not divisible by 16.
    """
    import torch

    for name, value in (("M", M), ("N", N), ("K", K)):
        _positive_int(name, value)
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
    """The FP8 throughput ceiling: torch's per-tensor-scaled e4m3 product with bf16 output.

    `use_fast_accum=True` by default because Triton's FP8 `tl.dot` on sm90 also accumulates
    imprecisely (triton/backends/nvidia/compiler.py: max_num_imprecise_acc_default = 2**30 on
    capability 90), so both sides run the tensor cores' fast path.

    Args:
        M: rows of a; None for GPU_MM_SIZE on CUDA, CPU_MM_SIZE on the CPU (same for N, K).
        N: columns of the output.
        K: the reduction size.
        device: "cuda", "cuda:N" or "cpu" (torch 2.13 runs _scaled_mm on the CPU too).
        fast_accum: passed as use_fast_accum.
        timer: median milliseconds of a callable; default `median_ms` on `device`.

    Returns:
        TFLOP/s (2 * M * N * K per call).

    Raises:
        ValueError: a bad size or device.
    """
    import torch

    _check_device(device)
    size = CPU_MM_SIZE if device == "cpu" else GPU_MM_SIZE
    M, N, K = (size if v is None else v for v in (M, N, K))
    a, b, scale_a, scale_b = fp8_mm_operands(M, N, K, device)

    def product():
        return torch._scaled_mm(
            a,
            b,
            scale_a=scale_a,
            scale_b=scale_b,
            out_dtype=torch.bfloat16,
            use_fast_accum=fast_accum,
        )

    ms = (timer or (lambda fn: median_ms(fn, device)))(product)
    return gemm_flops(M, N, K) / (ms * 1e-3) / 1e12


def measure_ceilings(device: str = "cuda", *, timer: Timer | None = None) -> dict[str, float]:
    """Both ceilings of a device at the default sizes for its kind (GPU or CPU).

    Called once per CUDA worker start; the result goes to the store (db.repo.record_ceilings).

    Args:
        device: "cuda", "cuda:N" or "cpu".
        timer: median milliseconds of a callable; default `median_ms` on `device`.

    Returns:
        {"copy_gbps": GB/s read plus write, "fp8_mm_tflops": TFLOP/s}.

    Raises:
        ValueError: a bad device.
    """
    return {
        COPY_GBPS: measure_copy_gbps(device=device, timer=timer),
        FP8_MM_TFLOPS: measure_fp8_mm_tflops(device=device, timer=timer),
    }


def ceiling_details(device: str = "cuda") -> dict[str, str]:
    """How `measure_ceilings(device)` measures each ceiling, one line each, to store with the
    values (db.repo.record_ceilings(details=...)).

    Args:
        device: "cuda", "cuda:N" or "cpu", as given to `measure_ceilings`.

    Returns:
        {"copy_gbps": ..., "fp8_mm_tflops": ...}.

    Raises:
        ValueError: a bad device.
    """
    _check_device(device)
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
