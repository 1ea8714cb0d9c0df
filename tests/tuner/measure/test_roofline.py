"""Roofline figures: exact bytes and flops, and the achieved GB/s and TFLOP/s; its module loads
no torch: tests/tuner/kernels/test_family.py."""

import math

import pytest

from tuner.measure.roofline import roofline


def test_bytes_flops_rates_and_bad_latencies():
    # A 2048 + B 7168*2048 + As 4*1*16 + Bs 4*56*16 + C 2*1*7168
    assert roofline(1, 7168, 2048, 1.0).bytes == 2048 + 14_680_064 + 64 + 3_584 + 14_336
    # K and N not multiples of the groups: scales round up (K=200 -> 2 groups, N=130 -> 2).
    assert roofline(3, 130, 200, 1.0, out_dtype="float16").bytes == (
        3 * 200 + 130 * 200 + 4 * 3 * 2 + 4 * 2 * 2 + 2 * 3 * 130
    )
    r = roofline(1, 7168, 2048, 16.0)
    assert (r.bytes, r.flops) == (14_700_096, 29_360_128)
    assert (r.gbps, r.tflops) == pytest.approx((918.756, 1.835008))  # bytes, flops / 16 us
    for latency_us in (0.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="latency_us must be a positive finite number"):
            roofline(1, 128, 128, latency_us)
