"""tuner compare's core with a fake runner: which kernels are timed, failed or unavailable, and
the decode/prefill verdicts computed from exact latencies."""

from __future__ import annotations

import math

import pytest

from tuner.compare.backends import TORCH_SCALED_MM, TRITON_DEFAULT, TRITON_TUNED, Candidate
from tuner.compare.versus import BackendTime, ComparePoint, compare_point, per_m, verdicts
from tuner.core import TrialStatus
from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.space import default_config
from tuner.measure.noise import retime_interleaved
from tuner.measure.trial import TrialResult

DEFAULT = default_config()
TUNED = KernelConfig(16, 64, 128, 1, 4, 3)


class FakeRunner:
    """Fixed samples per candidate; `broken` candidates fail their check."""

    def __init__(self, samples: dict[str, list[float]], broken: set[str] = frozenset()) -> None:
        self.samples = {name: list(values) for name, values in samples.items()}
        self.broken = broken
        self.checked: list[str] = []
        self.sampled: list[str] = []

    def check(self, candidate: Candidate) -> TrialResult:
        self.checked.append(candidate.backend)
        if candidate.backend in self.broken:
            return TrialResult(TrialStatus.WRONG_RESULT, error="relative error 0.5 >= 0.01")
        return TrialResult(TrialStatus.OK, rel_error=0.001)

    def sample_us(self, candidate: Candidate) -> float:
        self.sampled.append(candidate.backend)
        return self.samples[candidate.backend].pop(0)


def test_kernels_are_checked_then_timed_interleaved() -> None:
    runner = FakeRunner(
        {TRITON_TUNED: [10.0, 12.0, 11.0], TRITON_DEFAULT: [20.0, 22.0, 21.0]},
        broken={TORCH_SCALED_MM},
    )
    point = compare_point(
        5120,
        3072,
        16,
        runner=runner,
        rounds=3,
        retime=retime_interleaved,
        candidates=[
            Candidate(TRITON_TUNED, TUNED),
            Candidate(TRITON_DEFAULT, DEFAULT),
            Candidate(TORCH_SCALED_MM),
        ],
        unavailable={"vllm-marlin": "not wired"},
    )
    assert runner.checked == [TRITON_TUNED, TRITON_DEFAULT, TORCH_SCALED_MM]
    # One sample of each per round, each round starting one later (A B, B A, A B).
    assert runner.sampled == [
        TRITON_TUNED,
        TRITON_DEFAULT,
        TRITON_DEFAULT,
        TRITON_TUNED,
        TRITON_TUNED,
        TRITON_DEFAULT,
    ]
    assert [(t.backend, t.status, t.latency_us, t.note) for t in point.times] == [
        (TRITON_TUNED, "ok", 11.0, "16x64x128 g1 w4 s3"),
        (TRITON_DEFAULT, "ok", 21.0, "64x128x128 g32 w4 s2"),
        (TORCH_SCALED_MM, "failed", None, "wrong_result: relative error 0.5 >= 0.01"),
        ("vllm-marlin", "unavailable", None, "not wired"),
    ]
    assert point.fastest == TRITON_TUNED


def test_a_tuned_config_that_is_the_default_is_timed_once() -> None:
    runner = FakeRunner({TRITON_DEFAULT: [20.0, 30.0]})
    point = compare_point(
        256,
        384,
        1,
        runner=runner,
        rounds=2,
        retime=retime_interleaved,
        candidates=[Candidate(TRITON_TUNED, DEFAULT), Candidate(TRITON_DEFAULT, DEFAULT)],
        unavailable={},
    )
    assert runner.checked == [TRITON_DEFAULT]
    assert point.latency(TRITON_TUNED) == point.latency(TRITON_DEFAULT) == 25.0


def test_a_kernel_that_checks_but_cannot_be_timed_fails_and_the_others_are_timed() -> None:
    class Uncapturable(FakeRunner):
        def sample_us(self, candidate: Candidate) -> float:
            if candidate.backend == "vllm-marlin":
                raise RuntimeError("operation not permitted when stream is capturing")
            return super().sample_us(candidate)

    runner = Uncapturable({TRITON_TUNED: [10.0, 12.0, 14.0, 16.0]})
    point = compare_point(
        256,
        384,
        1,
        runner=runner,
        rounds=2,
        retime=retime_interleaved,
        candidates=[Candidate(TRITON_TUNED, TUNED), Candidate("vllm-marlin")],
        unavailable={},
    )
    # Interleaved: tuned's first sample, then marlin raised; tuned alone then takes 2 more.
    assert [(t.backend, t.status, t.latency_us, t.note) for t in point.times] == [
        (TRITON_TUNED, "ok", 13.0, "16x64x128 g1 w4 s3"),
        (
            "vllm-marlin",
            "failed",
            None,
            "timing: RuntimeError: operation not permitted when stream is capturing",
        ),
    ]


def _point(M: int, N: int = 1, **latency: float) -> ComparePoint:
    names = {"tuned": TRITON_TUNED, "default": TRITON_DEFAULT, "torch": TORCH_SCALED_MM}
    return ComparePoint(
        N, 128, M, tuple(BackendTime(names[k], "ok", v) for k, v in latency.items())
    )


def test_verdicts_by_regime() -> None:
    points = [
        _point(1, tuned=10.0, default=20.0, torch=40.0),
        _point(1, N=2, tuned=10.0, default=10.0, torch=10.0),
        _point(16, tuned=10.0, default=15.0, torch=5.0),
        _point(2048, tuned=100.0, default=100.0, torch=50.0),
        _point(4096, tuned=100.0, default=110.0, torch=180.0),
        _point(512, tuned=1.0, default=1.0, torch=1.0),  # neither decode nor prefill
    ]
    decode, prefill = verdicts(points)
    assert (decode.points, prefill.points) == (3, 2)
    # decode geomeans: tuned 10, default (20*10*15)^(1/3), torch (40*10*5)^(1/3) = 2000^(1/3).
    assert decode.winner == TRITON_TUNED
    assert decode.tuned_vs[TRITON_DEFAULT] == pytest.approx(3000 ** (1 / 3) / 10)
    assert decode.tuned_vs[TORCH_SCALED_MM] == pytest.approx(2000 ** (1 / 3) / 10)
    # prefill: torch sqrt(50*180) = 94.9 beats tuned's 100.
    assert prefill.winner == TORCH_SCALED_MM
    assert prefill.tuned_vs[TORCH_SCALED_MM] == pytest.approx(math.sqrt(9000) / 100)
    assert decode.line().startswith("decode (M <= 32): triton-tuned is fastest over 3 point(s)")
    assert per_m(points, TRITON_DEFAULT) == pytest.approx(
        {1: math.sqrt(2.0), 16: 1.5, 512: 1.0, 2048: 1.0, 4096: 1.1}
    )


def test_a_backend_missing_at_some_point_is_left_out_of_the_verdict() -> None:
    points = [_point(1, tuned=10.0, default=20.0, torch=1.0), _point(16, tuned=10.0, default=20.0)]
    (decode, prefill) = verdicts(points)
    assert decode.tuned_vs == {TRITON_DEFAULT: pytest.approx(2.0)}
    assert prefill.winner is None
    assert prefill.line() == "prefill (M >= 2048): no point where the kernels could all be compared"
