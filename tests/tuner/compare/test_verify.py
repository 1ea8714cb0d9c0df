"""tuner.compare.verify: the M values checked, and vLLM's pick judged against the default with fake
samplers (exact timings, no kernel)."""

from dataclasses import dataclass

import pytest

from tuner.compare.verify import (
    PointResult,
    ShapeVerification,
    Verdict,
    check_points,
    judge,
    m_limit,
    timed_points,
    verify_shape,
)
from tuner.core import VLLM_M_GRID, TrialStatus
from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.space import default_config
from tuner.measure.trial import TrialResult

DEFAULT = default_config()
BIG = KernelConfig(128, 128, 128, 1, 8, 3)
SMALL = KernelConfig(16, 64, 128, 1, 4, 3)


def test_points_are_keys_grid_midpoints_and_neighbours():
    assert check_points([1, 16], [1, 16, 32]) == [1, 2, 8, 15, 16, 17, 32]


def test_points_of_vllm_grid_with_the_three_shipped_l20_keys():
    # vLLM 0.33.0's NVIDIA_L20 files carry M = 2048, 3072, 4096 only.
    assert check_points([3072, 2048, 4096], VLLM_M_GRID) == [
        1,
        2,
        4,
        8,
        16,
        24,
        32,
        48,
        64,
        96,
        128,
        256,
        512,
        1024,
        1536,
        2047,
        2048,
        2049,
        2560,
        3071,
        3072,
        3073,
        3584,
        4095,
        4096,
    ]  # not 4097: above vLLM's largest batch size and every key


def test_points_stop_at_4096_or_the_largest_key():
    # The README's sweep grid (1, 16, 32) with a 4096 key added by another sweep.
    assert check_points([1, 16, 32, 4096], [1, 16, 32, 4096]) == [
        1,
        2,
        8,
        15,
        16,
        17,
        24,
        31,
        32,
        33,
        2064,
        4095,
        4096,
    ]
    assert m_limit([1, 16]) == 4096 and m_limit([16, 8192]) == 8192
    assert check_points([4096, 8192], []) == [4095, 4096, 4097, 6144, 8191, 8192]
    # an asked-for grid M above the limit is kept; only derived M are dropped
    assert check_points([16], [5000]) == [15, 16, 17, 5000]


def test_timed_points_are_those_whose_pick_is_not_the_default():
    configs = {1: BIG.as_dict(), 16: DEFAULT.as_dict(), 64: SMALL.as_dict()}
    points = check_points(configs, [1, 16, 64])
    assert points == [1, 2, 8, 15, 16, 17, 40, 63, 64, 65]
    # 8 is nearer to 1 than to 16; 40 is a tie of 16 and 64, which vLLM gives to 16 (default)
    assert timed_points(configs, points, (128, 128)) == [1, 2, 8, 63, 64, 65]


def test_midpoint_of_an_even_sum_is_the_tie_and_of_an_odd_sum_the_last_m_of_the_lower_key():
    # keys 1 and 4: (1 + 4) // 2 = 2 is nearer to 1; keys 2 and 8: 5 is a tie, vLLM takes 2.
    assert check_points([1, 4], []) == [1, 2, 3, 4, 5]
    assert check_points([2, 8], []) == [1, 2, 3, 5, 7, 8, 9]


def test_neighbours_stop_at_one_and_duplicates_collapse():
    assert check_points([1], [1]) == [1, 2]
    assert check_points([1, 2, 3], [2, 3]) == [1, 2, 3, 4]


@pytest.mark.parametrize(
    ("keys", "grid", "message"),
    [
        ([], [1], "no keys"),
        ([0, 4], [], ">= 1"),
        ([4], [0], ">= 1"),
    ],
)
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
    timed = PointResult(
        M=8,
        key=1,
        config=BIG,
        verdict=Verdict.SLOWER,
        timed=True,
        chosen_us=125.0,
        default_us=100.0,
        noise_us=2.0,
    )
    untimed = PointResult(M=16, key=16, config=DEFAULT, verdict=Verdict.OK, timed=False)
    failed = PointResult(
        M=2,
        key=1,
        config=BIG,
        verdict=Verdict.FAILED,
        timed=False,
        error="wrong_result: relative error 0.5 >= 0.01",
    )
    assert (timed.speedup, untimed.speedup, failed.speedup) == (0.8, 1.0, None)
    result = ShapeVerification(
        N=256, K=384, block_shape=(128, 128), keys=(1, 16), points=(failed, timed, untimed)
    )
    assert (result.slower, result.failed, result.offending) == ([8], [2], [2, 8])


class FakeRunner:
    """sample_us answers from a fixed list per config, in order; check answers `status`."""

    def __init__(
        self, samples: dict[KernelConfig, list[float]], status: TrialStatus = TrialStatus.OK
    ) -> None:
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


# Six rounds: p20 and p80 fall exactly on the 2nd and 5th of the six sorted samples.
DEFAULT_SAMPLES = [100.0, 101.0, 99.0, 100.0, 102.0, 98.0]  # median 100, p20 99, p80 101


def factory(samples_by_m, made, status=TrialStatus.OK):
    """make_runner(N, K, M) that records (N, K, M) and answers BIG's samples for that M."""

    def make(N, K, M):
        made.append((N, K, M))
        runner = FakeRunner({BIG: samples_by_m[M], DEFAULT: DEFAULT_SAMPLES}, status)
        made.append(runner)
        return runner

    return make


def test_slower_off_the_keys_is_flagged_within_noise_is_ok_and_default_is_not_timed():
    made = []
    samples = {
        1: [50.0] * 6,  # 2x faster
        2: [101.5] * 6,  # 1.5 us slower, within the default's spread of 2 us
        8: [104.0, 104.0, 103.0, 105.0, 104.0, 104.0],
    }  # 4 us slower: beyond the noise
    seen = []
    result = verify_shape(
        N=256,
        K=384,
        block_shape=(128, 128),
        configs={1: BIG.as_dict(), 16: DEFAULT.as_dict()},
        m_points=[1, 2, 8, 15, 16, 17],
        make_runner=factory(samples, made),
        rounds=6,
        on_point=seen.append,
    )
    assert result.points == (
        PointResult(1, 1, BIG, Verdict.OK, True, 50.0, 100.0, 2.0),
        PointResult(2, 1, BIG, Verdict.OK, True, 101.5, 100.0, 2.0),
        PointResult(8, 1, BIG, Verdict.SLOWER, True, 104.0, 100.0, 2.0),
        PointResult(15, 16, DEFAULT, Verdict.OK, False),
        PointResult(16, 16, DEFAULT, Verdict.OK, False),
        PointResult(17, 16, DEFAULT, Verdict.OK, False),
    )
    assert seen == list(result.points)
    assert (result.keys, result.slower, result.offending) == ((1, 16), [8], [8])
    assert [item for item in made if isinstance(item, tuple)] == [
        (256, 384, 1),
        (256, 384, 2),
        (256, 384, 8),
    ]
    runner = made[1]
    assert runner.checked == [BIG, DEFAULT]
    # interleaved, each round starting one config later: A B, B A, A B, ...
    assert runner.sampled == [BIG, DEFAULT, DEFAULT, BIG] * 3
    assert [point.speedup for point in result.points] == [2.0, 100 / 101.5, 100 / 104, 1, 1, 1]


def test_a_wrong_result_fails_and_is_not_timed():
    made = []
    result = verify_shape(
        N=576,
        K=256,
        block_shape=(128, 128),
        configs={4: BIG.as_dict()},
        m_points=[4],
        make_runner=factory({4: [1.0] * 6}, made, TrialStatus.WRONG_RESULT),
        rounds=6,
    )
    assert result.points == (
        PointResult(
            4, 4, BIG, Verdict.FAILED, False, error="wrong_result: relative error 0.5 >= 0.01"
        ),
    )
    assert made[1].sampled == []
    assert result.failed == [4]


def test_an_invalid_config_fails_without_a_runner_and_a_launch_error_is_a_failure():
    odd = KernelConfig(64, 128, 256, 32, 4, 2)  # BLOCK_SIZE_K 256 does not divide group_k 128
    made = []
    result = verify_shape(
        N=256,
        K=384,
        block_shape=(128, 128),
        configs={1: odd.as_dict()},
        m_points=[1],
        make_runner=factory({}, made),
        rounds=6,
    )
    assert result.points[0].error == (
        "invalid config: BLOCK_SIZE_K=256 does not divide group_k=128"
    )
    assert made == []

    class Crashing(FakeRunner):
        def check(self, config):
            raise RuntimeError("CUDA error:  illegal\n address")

    result = verify_shape(
        N=256,
        K=384,
        block_shape=(128, 128),
        configs={1: BIG.as_dict()},
        m_points=[3],
        make_runner=lambda N, K, M: Crashing({}),
        rounds=6,
    )
    assert result.points == (
        PointResult(
            3,
            1,
            BIG,
            Verdict.FAILED,
            False,
            error="crashed: RuntimeError: CUDA error: illegal address",
        ),
    )


def test_default_rounds_come_from_the_noise_module():
    from tuner.measure.noise import RETIME_ROUNDS

    made = []
    verify_shape(
        N=256,
        K=384,
        block_shape=(128, 128),
        configs={1: BIG.as_dict()},
        m_points=[1],
        make_runner=lambda N, K, M: (
            made.append(FakeRunner({BIG: [1.0] * 100, DEFAULT: [2.0] * 100})) or made[-1]
        ),
    )
    assert len(made[0].sampled) == 2 * RETIME_ROUNDS


def test_a_default_config_that_fails_its_check_fails_the_point():
    class DefaultWrong(FakeRunner):
        def check(self, config):
            self.checked.append(config)
            if config == DEFAULT:
                return TrialResult(TrialStatus.WRONG_RESULT, error="5 output elements not written")
            return TrialResult(TrialStatus.OK, rel_error=1e-3)

    runner = DefaultWrong({})
    result = verify_shape(
        N=256,
        K=384,
        block_shape=(128, 128),
        configs={1: BIG.as_dict()},
        m_points=[1],
        make_runner=lambda N, K, M: runner,
        rounds=6,
    )
    assert result.points == (
        PointResult(
            1,
            1,
            BIG,
            Verdict.FAILED,
            False,
            error=("default config wrong_result: 5 output elements not written"),
        ),
    )
    assert (runner.checked, runner.sampled) == ([BIG, DEFAULT], [])
