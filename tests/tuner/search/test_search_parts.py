"""The parts strategies are built from: ordered axes, the budget, warm starts, local search."""

import pytest

from tuner.core import TrialStatus
from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.space import default_config, vllm_space
from tuner.measure.trial import TrialResult
from tuner.search import get_strategy, warm_start_configs, warm_start_for_task
from tuner.search.axes import neighbours, space_axes
from tuner.search.budget import BudgetedEvaluate

SPACE = vllm_space()
DEFAULT = default_config()


def test_axes_of_vllms_space():
    axes = {axis.key: axis for axis in space_axes(SPACE)}
    m = axes["BLOCK_SIZE_M"]
    assert (m.param, m.low, m.high, m.log2) == ("log2_BLOCK_SIZE_M", 4, 8, True)
    assert m.coordinate(64) == 6 and m.value(6) == 64
    assert (axes["num_warps"].param, axes["num_warps"].low, axes["num_warps"].high) == (
        "log2_num_warps",
        2,
        3,
    )
    stages = axes["num_stages"]
    assert (stages.param, stages.low, stages.high) == ("num_stages", 2, 5)
    group = axes["GROUP_SIZE_M"]  # 1, 16, 32, 64: not consecutive powers of two
    assert (group.param, group.low, group.high, group.coordinate(32)) == ("GROUP_SIZE_M", 0, 3, 2)
    assert [group.value(i) for i in range(4)] == [1, 16, 32, 64]
    with pytest.raises(ValueError, match="empty"):
        space_axes([])


def test_neighbours_step_one_value_along_one_or_two_axes():
    axes = space_axes(SPACE)
    singles = list(neighbours(DEFAULT, axes))
    # BLOCK_SIZE_M 32/128, BLOCK_SIZE_N 64/256, BLOCK_SIZE_K 64, GROUP_SIZE_M 16/64,
    # num_warps 8, num_stages 3 (2 is the lowest).
    assert len(singles) == 9
    assert KernelConfig(32, 128, 128, 32, 4, 2) in singles
    assert KernelConfig(64, 128, 128, 64, 4, 2) in singles
    pairs = list(neighbours(DEFAULT, axes, pairs=True))
    assert singles == pairs[:9] and KernelConfig(32, 256, 128, 32, 4, 2) in pairs
    assert all(
        sum(a != b for a, b in zip(c.as_dict().values(), DEFAULT.as_dict().values(), strict=True))
        in (1, 2)
        for c in pairs
    )


def test_budgeted_evaluate_measures_each_config_of_the_space_once():
    calls = []

    def evaluate(config):
        calls.append(config)
        return TrialResult(TrialStatus.OK, float(len(calls)))

    tracker = BudgetedEvaluate(evaluate, SPACE[:3], budget=2)
    assert tracker(SPACE[1]).latency_us == 1.0
    assert tracker(SPACE[1]).latency_us == 1.0  # remembered, not measured again
    assert tracker(DEFAULT) is None  # not in this space
    assert tracker(SPACE[0]).latency_us == 2.0
    assert tracker(SPACE[2]) is None and tracker.left == 0  # budget spent
    assert calls == [SPACE[1], SPACE[0]]
    assert tracker.incumbent() == (SPACE[1], 1.0)


def test_warm_start_configs_order():
    a, b, c = SPACE[10], SPACE[20], SPACE[30]
    assert warm_start_configs(DEFAULT, [a, DEFAULT, b], [b, c]) == [DEFAULT, a, b, c]


def test_warm_start_for_task_picks_nearest_m_then_same_m_of_other_shapes():
    cfg = {m: SPACE[i] for i, m in enumerate((1, 16, 32, 64, 256, 2048, 4096))}
    other = SPACE[500]
    winners = [(5120, 3072, m, config) for m, config in cfg.items()]
    winners += [(7168, 5120, 32, other), (7168, 5120, 16, SPACE[600]), (5120, 3072, 32, other)]
    chosen = warm_start_for_task(winners, N=5120, K=3072, M=32, default=DEFAULT, max_neighbours=3)
    # |log2 M - 5|: 16 and 64 at 1, then 256 at 3; 2048 and 1 are further away. Same M (32)
    # on 7168x5120 follows; (5120, 3072, 32) itself is the task and is skipped.
    assert chosen == [DEFAULT, cfg[16], cfg[64], cfg[256], other]


def test_local_search_climbs_a_smooth_landscape():
    def evaluate(config):
        latency = (
            abs(config.BLOCK_SIZE_M.bit_length() - 8)
            + abs(config.num_stages - 4)
            + abs(config.BLOCK_SIZE_N.bit_length() - 7)
            + config.num_warps / 8
        )
        return TrialResult(TrialStatus.OK, 10.0 + latency)

    history = get_strategy("local").search(
        evaluate, space=SPACE, budget=40, seed=0, warm_start=[KernelConfig(16, 32, 128, 1, 8, 2)]
    )
    best = min(history, key=lambda item: item[1].latency_us)
    assert (best[0].BLOCK_SIZE_M, best[0].BLOCK_SIZE_N, best[0].num_stages, best[0].num_warps) == (
        128,
        64,
        4,
        4,
    )
