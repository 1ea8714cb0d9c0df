"""tuner.verify: the M values checked, and vLLM's pick judged against the default with fake
samplers (exact timings, no kernel)."""

from dataclasses import dataclass

import pytest

from tuner.configfile import VLLM_M_GRID
from tuner.space import KernelConfig, default_config
from tuner.trial import TrialResult, TrialStatus
from tuner.verify import PointResult, ShapeVerification, Verdict, check_points, judge

DEFAULT = default_config()
BIG = KernelConfig(128, 128, 128, 1, 8, 3)
SMALL = KernelConfig(16, 64, 128, 1, 4, 3)


def test_points_are_keys_grid_midpoints_and_neighbours():
    assert check_points([1, 16], [1, 16, 32]) == [1, 2, 8, 15, 16, 17, 32]


def test_points_of_vllm_grid_with_the_three_shipped_l20_keys():
    # vLLM 0.33.0's NVIDIA_L20 files carry M = 2048, 3072, 4096 only.
    assert check_points([3072, 2048, 4096], VLLM_M_GRID) == [
        1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536,
        2047, 2048, 2049, 2560, 3071, 3072, 3073, 3584, 4095, 4096, 4097,
    ]


def test_midpoint_of_an_even_sum_is_the_tie_and_of_an_odd_sum_the_last_m_of_the_lower_key():
    # keys 1 and 4: (1 + 4) // 2 = 2 is nearer to 1; keys 2 and 8: 5 is a tie, vLLM takes 2.
    assert check_points([1, 4], []) == [1, 2, 3, 4, 5]
    assert check_points([2, 8], []) == [1, 2, 3, 5, 7, 8, 9]


def test_neighbours_stop_at_one_and_duplicates_collapse():
    assert check_points([1], [1]) == [1, 2]
    assert check_points([1, 2, 3], [2, 3]) == [1, 2, 3, 4]


@pytest.mark.parametrize(("keys", "grid", "message"), [
    ([], [1], "no keys"),
    ([0, 4], [], ">= 1"),
    ([4], [0], ">= 1"),
])
def test_points_reject_bad_input(keys, grid, message):
    with pytest.raises(ValueError, match=message):
        check_points(keys, grid)


@dataclass(frozen=True)
class Timed:
    config: KernelConfig
    latency_us: float
    p20_us: float
    p80_us: float


def test_judge_slower_only_beyond_the_larger_spread():
    default = Timed(DEFAULT, 100.0, 98.0, 103.0)  # spread 5
    assert judge(Timed(BIG, 105.0, 104.0, 106.0), default) == (Verdict.OK, 5.0)
    assert judge(Timed(BIG, 105.5, 104.0, 106.0), default) == (Verdict.SLOWER, 5.0)
    # the pick's own spread (8) counts when it is the larger
    assert judge(Timed(BIG, 107.5, 100.0, 108.0), default) == (Verdict.OK, 8.0)
    assert judge(Timed(BIG, 60.0, 59.0, 61.0), default) == (Verdict.OK, 5.0)


def test_speedup_and_offending():
    timed = PointResult(M=8, key=1, config=BIG, verdict=Verdict.SLOWER, timed=True,
                        chosen_us=125.0, default_us=100.0, noise_us=2.0)
    untimed = PointResult(M=16, key=16, config=DEFAULT, verdict=Verdict.OK, timed=False)
    failed = PointResult(M=2, key=1, config=BIG, verdict=Verdict.FAILED, timed=False,
                         error="wrong_result: relative error 0.5 >= 0.01")
    assert (timed.speedup, untimed.speedup, failed.speedup) == (0.8, 1.0, None)
    result = ShapeVerification(N=256, K=384, block_shape=(128, 128), keys=(1, 16),
                               points=(failed, timed, untimed))
    assert (result.slower, result.failed, result.offending) == ([8], [2], [2, 8])


class FakeRunner:
    """sample_us answers from a fixed list per config, in order; check answers `status`."""

    def __init__(self, samples: dict[KernelConfig, list[float]],
                 status: TrialStatus = TrialStatus.OK) -> None:
        self.samples = {config: list(values) for config, values in samples.items()}
        self.status = status
        self.checked: list[KernelConfig] = []
        self.sampled: list[KernelConfig] = []

    def check(self, config: KernelConfig) -> TrialResult:
        self.checked.append(config)
        if self.status is TrialStatus.OK:
            return TrialResult(TrialStatus.OK, rel_error=1e-3)
        return TrialResult(self.status, error="relative error 0.5 >= 0.01")

    def sample_us(self, config: KernelConfig) -> float:
        self.sampled.append(config)
        return self.samples[config].pop(0)
