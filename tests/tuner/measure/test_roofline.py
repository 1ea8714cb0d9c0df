"""Roofline figures: exact bytes and flops, ratios to the ceilings, and the ceiling measurements
with a fake timer (plus one real CPU run of each, at small sizes); its pure part loads no torch:
tests/tuner/kernels/test_family.py."""

import math

import pytest
import torch

from tuner.measure.roofline import (
    CPU_COPY_BYTES,
    CPU_MM_SIZE,
    ceiling_details,
    gemm_bytes,
    gemm_flops,
    measure_ceilings,
    roofline,
)

CEILINGS = {"copy_gbps": 4000.0, "fp8_mm_tflops": 1000.0}  # ridge at 250 flops per byte


def test_gemm_bytes_counts_each_operand_once():
    # A 2048 + B 7168*2048 + As 4*1*16 + Bs 4*56*16 + C 2*1*7168
    assert gemm_bytes(1, 7168, 2048) == 2048 + 14_680_064 + 64 + 3_584 + 14_336 == 14_700_096
    # K and N not multiples of the groups: scales round up (K=200 -> 2 groups, N=130 -> 2).
    assert gemm_bytes(3, 130, 200, (128, 128), "float16") == (
        3 * 200 + 130 * 200 + 4 * 3 * 2 + 4 * 2 * 2 + 2 * 3 * 130
    )
    assert gemm_flops(1, 7168, 2048) == 29_360_128


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: measure_ceilings("mps"), "device must be"),
        (lambda: roofline(1, 128, 128, 0.0), "latency_us must be a positive finite number"),
        (lambda: roofline(1, 128, 128, math.nan), "latency_us must be a positive finite number"),
        (lambda: roofline(1, 128, 128, 1.0, {"copy_gbps": -1.0}), "copy_gbps must be"),
    ],
)
def test_bad_input_raises_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_roofline_without_ceilings_has_figures_and_no_ratios():
    r = roofline(1, 7168, 2048, 16.0)
    assert (r.bytes, r.flops) == (14_700_096, 29_360_128)
    assert r.gbps == pytest.approx(918.756)  # 14,700,096 bytes / 16 us
    assert r.tflops == pytest.approx(1.835008)
    assert r.intensity == pytest.approx(29_360_128 / 14_700_096)
    assert (r.copy_ratio, r.fp8_mm_ratio, r.ridge_intensity, r.bound, r.roofline_ratio) == (
        (None,) * 5
    )
    only_copy = roofline(1, 7168, 2048, 16.0, {"copy_gbps": 4000.0, "other": 1.0})
    assert only_copy.copy_ratio == pytest.approx(918.756 / 4000)
    assert (only_copy.fp8_mm_ratio, only_copy.bound) == (None, None)


@pytest.mark.parametrize(
    ("M", "N", "K", "latency_us", "figures"),
    [
        # A 65536 + B 131072 + As 4*128*4 + Bs 4*2*4 + C 2*128*256 = 264,224 bytes, 127 flops
        # per byte: below the ridge (250), the copy roof: 132.112 GB/s of 4000
        (128, 256, 512, 2.0, (264_224, "memory", 0.033028, 0.016777216, 0.033028)),
        # 4 * 4096^2 (A, B, C at 2 bytes) + As 4*4096*32 + Bs 4*32*32 = 67,637,248 bytes, 2032
        # flops per byte: above the ridge, the FP8 roof: 687.19 TFLOP/s of 1000
        (4096, 4096, 4096, 200.0, (67_637_248, "compute", 0.08454656, 0.687194767, 0.687194767)),
    ],
)
def test_memory_and_compute_bound_calls(M, N, K, latency_us, figures):
    r = roofline(M, N, K, latency_us, CEILINGS)
    assert (r.flops, r.ridge_intensity) == (2 * M * N * K, 250.0)
    assert (r.bytes, r.bound, r.copy_ratio, r.fp8_mm_ratio, r.roofline_ratio) == pytest.approx(
        figures
    )


class FakeTimer:
    """Runs the timed callable once (so its work can be checked) and answers a fixed time."""

    def __init__(self, ms):
        self.ms, self.results = list(ms), []

    def __call__(self, fn):
        self.results.append(fn())
        return self.ms.pop(0)


def test_ceilings_copy_and_multiply_at_the_cpu_sizes():
    timer = FakeTimer([1.0, 0.25])
    assert measure_ceilings("cpu", timer=timer) == pytest.approx(
        {
            "copy_gbps": 2 * CPU_COPY_BYTES / 1e-3 / 1e9,  # read plus write: 33.554432
            "fp8_mm_tflops": 2 * CPU_MM_SIZE**3 / 0.25e-3 / 1e12,  # 0.134217728
        }
    )
    copied, product = timer.results
    assert copied.dtype == torch.uint8 and tuple(copied.shape) == (CPU_COPY_BYTES,)
    assert product.dtype == torch.bfloat16 and tuple(product.shape) == (CPU_MM_SIZE,) * 2
    generator = torch.Generator().manual_seed(0)  # the operands: seed 0, uniform in [-1, 1)
    a, b = (
        (torch.rand(256, 256, generator=generator) * 2 - 1).to(torch.float8_e4m3fn) for _ in "ab"
    )
    assert torch.allclose(product.double(), a.double() @ b.double().t(), rtol=1e-2, atol=1e-2)
    real = measure_ceilings("cpu")  # one real CPU run of each
    assert all(math.isfinite(v) and v > 0 for v in real.values())
    assert ceiling_details("cuda") == {
        "copy_gbps": "dst.copy_(src) of 1073741824 bytes on cuda, read plus write counted; "
        "median of triton.testing.do_bench",
        "fp8_mm_tflops": "torch._scaled_mm 8192x8192x8192 e4m3, per-tensor scales, bf16 out, "
        "use_fast_accum=True on cuda; median of triton.testing.do_bench",
    }
    assert ceiling_details("cpu")["copy_gbps"] == (
        "dst.copy_(src) of 16777216 bytes on cpu, read plus write counted; median of 5 "
        "perf_counter calls"
    )
