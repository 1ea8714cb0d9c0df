"""Iterated local search: pruned configs cost no budget, a tile batch starts every basin, kicks
leave a steep local optimum."""

import random

from tuner.core import TrialStatus
from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.space import default_config, vllm_space
from tuner.measure.trial import TrialResult
from tuner.search import best, get_strategy
from tuner.search.axes import space_axes
from tuner.search.budget import BudgetedEvaluate
from tuner.search.ils import climb, kicked, tile_batch

SPACE = vllm_space()
AXES = space_axes(SPACE)
DEFAULT = default_config()  # 64x128x128 g32 w4 s2


def two_basins(config: KernelConfig) -> TrialResult:
    """Basin A around the default (best 100 us at the default), basin B on 256x32 tiles (best
    60 us at 256x32x128 g32 w8 s4), two tile steps away behind a 300 us ridge; BLOCK_SIZE_M 16
    does not compile (pruned)."""
    if config.BLOCK_SIZE_M == 16:
        return TrialResult(TrialStatus.COMPILE_ERROR, error="no")
    group = abs((1, 16, 32, 64).index(config.GROUP_SIZE_M) - 2)  # steps from 32
    steps = abs(config.num_stages - 2) + (config.num_warps != 4) + group
    if (config.BLOCK_SIZE_M, config.BLOCK_SIZE_N) == (256, 32):
        latency = 60.0 + 5 * (
            abs(config.num_stages - 4)
            + (config.num_warps != 8)
            + group
            + (config.BLOCK_SIZE_K != 128)
        )
    elif (config.BLOCK_SIZE_M, config.BLOCK_SIZE_N) in ((64, 128), (64, 64), (32, 128)):
        latency = 100.0 + 4 * steps + 10 * (config.BLOCK_SIZE_K != 128)
    else:
        latency = 300.0
    return TrialResult(TrialStatus.OK, latency, latency - 0.5, latency + 0.5)


class Recorder:
    def __init__(self):
        self.calls = []

    def __call__(self, config):
        self.calls.append(config)
        return two_basins(config)


def test_pruned_configs_cost_no_budget_and_the_tile_batch_follows_the_warm_starts():
    recorder = Recorder()
    history = get_strategy("ils").search(
        recorder, space=SPACE, budget=40, seed=5, warm_start=[DEFAULT]
    )
    pruned = [c for c in recorder.calls if c.BLOCK_SIZE_M == 16]
    assert len(recorder.calls) == len(set(recorder.calls)) == 40 + len(pruned)
    assert len(pruned) >= 4  # the tile batch's four 16-row tiles at least
    tiles = tile_batch(DEFAULT, AXES, random.Random(5))
    assert recorder.calls[:20] == [DEFAULT, *[t for t in tiles if t != DEFAULT]]
    assert [config for config, _ in history] == recorder.calls


def test_escapes_the_basin_local_stays_in():
    results = {}
    for name in ("local", "ils"):
        history = get_strategy(name).search(
            two_basins, space=SPACE, budget=48, seed=1, warm_start=[DEFAULT]
        )
        results[name] = best(history)
    assert results["local"][1].latency_us == 100.0  # the default's basin
    assert results["ils"] == (
        KernelConfig(256, 32, 128, 32, 8, 4),
        two_basins(KernelConfig(256, 32, 128, 32, 8, 4)),
    )


def test_kicked_changes_two_or_three_axes_to_other_values_of_the_space():
    rng = random.Random(3)
    for _ in range(200):
        config = kicked(DEFAULT, AXES, rng)
        changed = [k for k, v in config.as_dict().items() if v != DEFAULT.as_dict()[k]]
        assert len(changed) in (2, 3)
        assert all(getattr(config, a.key) in a.values for a in AXES)


def test_climb_stops_where_no_one_step_neighbour_is_faster():
    tracker = BudgetedEvaluate(two_basins, SPACE, budget=100)
    start = KernelConfig(256, 32, 64, 1, 4, 2)  # basin B, four steps from its bottom
    tracker(start)
    end = climb(tracker, AXES, random.Random(0), start)
    assert end == KernelConfig(256, 32, 128, 32, 8, 4)
    assert tracker.left > 0
