"""The live runner on the interpreter: correctness gate, failure statuses, timing summary."""

import pytest
import torch

from tuner.measure import REL_TOL, KernelRunner, Problem, summarize_us
from tuner.space import KernelConfig, default_config
from tuner.trial import TrialStatus

PROBLEM = Problem(M=5, N=192, K=256, block_shape=(128, 128), out_dtype="bfloat16")
SMALL = KernelConfig(16, 64, 64, 1, 4, 2)


class FakeClock:
    """Advances by the next step each time it is read twice (start, stop)."""

    def __init__(self, durations_s):
        self.readings = []
        now = 0.0
        for duration in durations_s:
            self.readings += [now, now + duration]
            now += duration + 1.0

    def __call__(self):
        return self.readings.pop(0)


def test_summarize_us():
    assert summarize_us([2e-6]) == (2.0, 2.0, 2.0)
    median, p20, p80 = summarize_us([5e-6, 1e-6, 3e-6, 2e-6, 4e-6])
    assert (median, p20, p80) == pytest.approx((3.0, 1.8, 4.2))
    with pytest.raises(ValueError):
        summarize_us([])


def test_default_config_passes_the_gate_and_is_timed_with_the_clock():
    clock = FakeClock([0.003, 0.001, 0.002])
    runner = KernelRunner(PROBLEM, backend="interpreter", seed=1, interpreter_reps=3, clock=clock)
    result = runner.evaluate(default_config())
    assert result.status is TrialStatus.OK
    assert result.ok
    assert 0 < result.rel_error < REL_TOL
    assert (result.latency_us, result.p20_us, result.p80_us) == pytest.approx((2000, 1400, 2600))
    assert result.measure_s > 0


def test_invalid_config_is_not_launched():
    runner = KernelRunner(PROBLEM, backend="interpreter")
    result = runner.evaluate(KernelConfig(64, 128, 256, 32, 4, 2))
    assert result.status is TrialStatus.INVALID
    assert result.error == "BLOCK_SIZE_K=256 does not divide group_k=128"
    assert result.latency_us is None


def test_wrong_result_is_caught():
    runner = KernelRunner(PROBLEM, backend="interpreter")
    runner.reference = runner.reference * 1.05  # a 5% error, as a wrong scale would give
    result = runner.evaluate(SMALL)
    assert result.status is TrialStatus.WRONG_RESULT
    # 0.05 / 1.05 from the scaling, plus bf16 rounding of the output (below 5e-3)
    assert result.rel_error == pytest.approx(0.05 / 1.05, abs=5e-3)
    assert result.latency_us is None


def test_unwritten_output_is_caught(monkeypatch):
    runner = KernelRunner(PROBLEM, backend="interpreter")

    def writes_half(config, out=None):
        out[: PROBLEM.M // 2] = runner.reference[: PROBLEM.M // 2].to(out.dtype)

    monkeypatch.setattr(runner, "_launch", writes_half)
    result = runner.evaluate(SMALL)
    assert result.status is TrialStatus.WRONG_RESULT
    assert result.error == f"{(PROBLEM.M - PROBLEM.M // 2) * PROBLEM.N} output elements not written"


def test_a_launch_that_raises_is_recorded_not_raised(monkeypatch):
    runner = KernelRunner(PROBLEM, backend="interpreter")

    def boom(config, out=None):
        raise RuntimeError("CUDA error: an illegal memory access\nwas encountered")

    monkeypatch.setattr(runner, "_launch", boom)
    result = runner.evaluate(SMALL)
    assert result.status is TrialStatus.CRASHED
    assert result.error == "RuntimeError: CUDA error: an illegal memory access was encountered"


def test_fp16_output_and_bad_arguments():
    runner = KernelRunner(Problem(1, 64, 128, out_dtype="float16"), backend="interpreter")
    assert runner.evaluate(SMALL).ok
    assert runner.out_dtype is torch.float16
    with pytest.raises(ValueError, match="backend must be"):
        KernelRunner(PROBLEM, backend="rocm")
    with pytest.raises(ValueError, match="out_dtype must be one of"):
        KernelRunner(Problem(1, 64, 128, out_dtype="float32"), backend="interpreter")
