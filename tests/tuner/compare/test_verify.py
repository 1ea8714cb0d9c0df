"""tuner.compare.versus: the M values checked, vLLM's pick judged against the default with fake
samplers (exact timings, no kernel), the shapes planned from a device's files, `--fix`'s passes."""

from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from tuner.compare.versus import (
    PlannedShape,
    PointResult,
    Verdict,
    check_points,
    judge,
    plan,
    verify_shape,
)
from tuner.core import VLLM_M_GRID, TrialStatus
from tuner.files.merge import DeviceFiles, SkippedShape, dense_key
from tuner.inputs.shapes import ModelShapes
from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.space import default_config
from tuner.kernels.shape import Shape
from tuner.measure.trial import TrialResult

BLOCK = (128, 128)
SHAPE = Shape(256, 384, BLOCK)
DEFAULT = default_config()
BIG = KernelConfig(128, 128, 128, 1, 8, 3)
SMALL = KernelConfig(16, 64, 128, 1, 4, 3)


def test_points_are_keys_grid_midpoints_and_neighbours_up_to_4096_or_the_largest_key():
    assert check_points([1, 16], [1, 16, 32]) == [1, 2, 8, 15, 16, 17, 32]
    # (1 + 4) // 2 = 2 is nearer to 1; keys 2 and 8: 5 is a tie, which vLLM gives to 2
    assert check_points([1, 4], []) == [1, 2, 3, 4, 5]
    assert check_points([2, 8], []) == [1, 2, 3, 5, 7, 8, 9]
    assert check_points([1, 2, 3], [2, 3]) == [1, 2, 3, 4]
    # vLLM 0.33.0's NVIDIA_L20 files carry M = 2048, 3072, 4096 only; no 4097
    assert check_points([3072, 2048, 4096], VLLM_M_GRID) == [
        *VLLM_M_GRID[:15],
        *(2047, 2048, 2049, 2560, 3071, 3072, 3073, 3584, 4095, 4096),
    ]
    assert check_points([4096, 8192], []) == [4095, 4096, 4097, 6144, 8191, 8192]
    assert check_points([16], [5000]) == [15, 16, 17, 5000]  # an asked grid M is kept


@dataclass(frozen=True)
class Timed:
    config: KernelConfig
    latency_us: float
    p20_us: float
    p80_us: float


def test_judge_slower_only_beyond_the_larger_spread_or_the_noise_floor():
    default = Timed(DEFAULT, 100.0, 98.0, 103.0)  # spread 5
    assert judge(Timed(BIG, 105.0, 104.0, 106.0), default) == (Verdict.OK, 5.0)
    assert judge(Timed(BIG, 105.5, 104.0, 106.0), default) == (Verdict.SLOWER, 5.0)
    assert judge(Timed(BIG, 107.5, 100.0, 108.0), default) == (Verdict.OK, 8.0)  # its own spread
    assert judge(Timed(BIG, 125.0, 125.0, 125.0), default, 0.3) == (Verdict.OK, 30.0)


class FakeRunner:
    """sample_us answers from a fixed list per config, in order; check answers `status`. Both
    take `tuner compare`'s Candidates, as `verify_shape` passes them."""

    def __init__(self, samples, status=TrialStatus.OK, failing=None) -> None:
        self.samples = {config: list(values) for config, values in samples.items()}
        self.status, self.failing = status, failing
        self.checked: list[KernelConfig] = []
        self.sampled: list[KernelConfig] = []

    def check(self, candidate) -> TrialResult:
        config = candidate.config
        self.checked.append(config)
        if self.failing == "raise":
            raise RuntimeError("CUDA error:  illegal\n address")
        if self.status is TrialStatus.OK and config != self.failing:
            return TrialResult(TrialStatus.OK, rel_error=1e-3)
        return TrialResult(TrialStatus.WRONG_RESULT, error="relative error 0.5 >= 0.01")

    def sample_us(self, candidate) -> float:
        self.sampled.append(candidate.config)
        return self.samples[candidate.config].pop(0)


# A pick slower off the keys, within noise, and the default's M untimed, through `tuner verify`:
# tests/cli/test_verify_cli.py; the interleaved order: tests/tuner/measure/test_noise.py.


@pytest.mark.parametrize(
    ("failing", "status", "error"),
    [
        (DEFAULT, TrialStatus.OK, "default config wrong_result: relative error 0.5 >= 0.01"),
        ("raise", TrialStatus.OK, "crashed: RuntimeError: CUDA error: illegal address"),
    ],
)
def test_a_pick_or_default_that_fails_its_check_fails_the_point(failing, status, error):
    """A wrong pick: tests/cli/test_verify_cli.py."""
    runner = FakeRunner({BIG: [1.0] * 6}, status, failing)
    planned = PlannedShape(SHAPE, {1: BIG.as_dict()}, (3,))
    result = verify_shape(planned, lambda N, K, M: runner, rounds=6)
    assert result.points == (PointResult(3, 1, BIG, Verdict.FAILED, False, error=error),)
    assert DEFAULT not in runner.sampled and result.points[0].speedup is None
    assert result.offending == [3]


# An invalid config fails its point with no runner made: test_proof_family.py.
SHAPES = ModelShapes(
    model="tiny",
    description="",
    tp=1,
    block_shape=BLOCK,
    source="test",
    groups={"dense": (Shape(256, 384, BLOCK), Shape(576, 256, BLOCK))},
)
CONFIGS = {1: SMALL.as_dict(), 16: DEFAULT.as_dict()}
FILE = SimpleNamespace(key=dense_key(256, 384, BLOCK), merged=SimpleNamespace(configs=CONFIGS))
SKIPPED = [SkippedShape(dense_key(576, 256, BLOCK), "M=16 has no trials", [16])]


def test_plan_checks_each_file_and_names_the_shape_without_one():
    files = DeviceFiles(files=[FILE], skipped=SKIPPED)
    planned, missing = plan(SHAPES, files, {dense_key(256, 384, BLOCK): (1, 16)})
    # keys 1, 16; midpoint 8; neighbours 2, 15, 17
    assert planned == [PlannedShape(SHAPE, CONFIGS, (1, 2, 8, 15, 16, 17))]
    assert missing == [
        "N=576,K=256: no file (M=16 has no trials); vLLM runs its default config there"
    ]
    assert plan(SHAPES, DeviceFiles(files=[], skipped=SKIPPED), {}, only=set()) == ([], [])
    with pytest.raises(ValueError) as raised:
        plan(SHAPES, DeviceFiles(files=[], skipped=SKIPPED), {})
    assert str(raised.value) == (
        "no file of tiny TP 1 to check (N=256,K=384: no trials in the store; "
        "N=576,K=256: M=16 has no trials)"
    )
