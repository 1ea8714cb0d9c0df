"""Every registered strategy keeps the Strategy contract on a replayed landscape; the registry,
grid, the axes and the warm starts that strategies are built on."""

import math

import pytest

from tests.tuner.measure.test_landscape import landscape_of
from tuner.core import TrialStatus
from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.space import default_config, vllm_space
from tuner.measure.trial import TrialResult
from tuner.search.axes import neighbours, space_axes
from tuner.search.base import best
from tuner.search.registry import STRATEGIES, get_strategy
from tuner.search.warm_start import related, warm_start_for_task

SPACE = vllm_space()
DEFAULT = default_config()  # 64x128x128 g32 w4 s2
NAMES = sorted(STRATEGIES)
# Warm starts as a worker passes them: the default, then winners of other tasks.
WARM = [DEFAULT, KernelConfig(16, 64, 128, 1, 4, 5), KernelConfig(128, 128, 128, 16, 8, 3)]


def synthetic(config: KernelConfig) -> TrialResult:
    """A bumpy made-up latency; about one config in six fails (out of resources, wrong result,
    compile error)."""
    if config.BLOCK_SIZE_M * config.BLOCK_SIZE_N * config.num_stages > 2**17:
        return TrialResult(TrialStatus.OUT_OF_RESOURCES, error="shared memory")
    if config.GROUP_SIZE_M == 64 and config.num_stages == 2:
        return TrialResult(TrialStatus.WRONG_RESULT, rel_error=0.5)
    if config.BLOCK_SIZE_K == 64 and config.num_warps == 8 and config.BLOCK_SIZE_M == 16:
        return TrialResult(TrialStatus.COMPILE_ERROR, error="compile error")
    bumps = math.sin(config.BLOCK_SIZE_M / 7.0) + math.cos(config.BLOCK_SIZE_N * config.num_stages)
    latency = 20.0 + 3 * abs(math.log2(config.BLOCK_SIZE_M / 64)) + bumps + config.num_warps / 4
    return TrialResult(TrialStatus.OK, latency, latency - 0.1, latency + 0.1)


def make_runner(fail_all: bool = False):
    """A replay runner; BLOCK_SIZE_N=32 with 8 warps is not recorded (it answers invalid)."""
    results = [
        (512, 1024, 16, c, TrialResult(TrialStatus.CRASHED) if fail_all else synthetic(c))
        for c in SPACE
        if not (c.BLOCK_SIZE_N == 32 and c.num_warps == 8)
    ]
    return landscape_of(results).runner(512, 1024, 16)


RUNNER, FAILING = make_runner(), make_runner(fail_all=True)


def search(name, budget=40, seed=3, space=SPACE, warm_start=WARM, runner=RUNNER):
    """The configs `evaluate` was called with, in order, and the history."""
    calls = []

    def evaluate(config):
        calls.append(config)
        return runner.evaluate(config)

    history = get_strategy(name).search(
        evaluate, space=space, budget=budget, seed=seed, warm_start=warm_start
    )
    return calls, history


def counted(name, calls, runner=RUNNER):
    """Calls that count against the budget: all but the statuses the strategy declares free."""
    return sum(runner.evaluate(c).status not in get_strategy(name).free for c in calls)


@pytest.mark.parametrize("name", NAMES)
def test_budget_distinct_configs_warm_starts_first_and_seeded(name):
    outside = KernelConfig(64, 128, 128, 32, 2, 2)  # 2 warps: not in vLLM's space
    warm = [WARM[1], outside, WARM[0], WARM[1], WARM[2]]
    calls, history = search(name, budget=64, warm_start=warm)
    assert calls[:3] == [WARM[1], WARM[0], WARM[2]] and outside not in calls
    assert len(calls) == len(set(calls)) and counted(name, calls) == 64
    assert len(calls) == 64 or get_strategy(name).free  # guided: pruned configs are free
    assert history == [(c, RUNNER.evaluate(c)) for c in calls]
    assert TrialStatus.OK in {r.status for _, r in history} and not all(r.ok for _, r in history)
    _, result = best(history)
    assert result.latency_us == min(r.latency_us for _, r in history if r.ok)
    assert result.latency_us <= RUNNER.evaluate(DEFAULT).latency_us
    assert search(name, budget=64, warm_start=warm)[0] == calls  # resumable, replayable
    assert (search(name, budget=64, seed=4, warm_start=warm)[0] == calls) == (name == "grid")


@pytest.mark.parametrize("name", NAMES)
def test_only_configs_of_the_space_each_once_and_none_at_budget_zero(name):
    subspace = [c for c in SPACE if c.BLOCK_SIZE_K == 128 and c.num_stages in (3, 4)]
    calls, _ = search(name, space=subspace)
    assert counted(name, calls) == 40 and set(calls) <= set(subspace)
    assert DEFAULT not in calls  # a warm start outside the space (2 stages)
    small = SPACE[:5]
    calls, history = search(name, budget=50, space=small, warm_start=[small[3]])
    assert calls[0] == small[3] and sorted(calls) == sorted(small) and len(history) == 5
    assert search(name, budget=0) == ([], [])


@pytest.mark.parametrize("name", NAMES)
def test_everything_failing_spends_the_budget_and_has_no_winner(name):
    calls, history = search(name, budget=24, runner=FAILING)
    assert len(calls) == len(set(calls))
    assert counted(name, calls, FAILING) == 24 <= len(calls)  # invalid ones: free for guided
    assert best(history) is None


@pytest.mark.parametrize("budget", [5, 40])
@pytest.mark.parametrize("name", NAMES)
def test_what_a_strategy_plans_is_what_it_measures_first(name, budget):
    """`planned` (what the compile pool prepares ahead of the GPU) is a prefix of the history:
    grid's whole space, the others' warm starts of the space."""
    warm = [*WARM, KernelConfig(512, 64, 128, 1, 4, 2)]  # not in the space: never planned
    plan = get_strategy(name).planned(space=SPACE, seed=11, warm_start=warm)[:budget]
    _, history = search(name, budget=budget, seed=11, warm_start=warm)
    assert [config for config, _ in history[: len(plan)]] == plan
    assert len(plan) == min(budget, len(SPACE) if name == "grid" else len(WARM))


def test_the_registry_names_the_strategies():
    assert list(STRATEGIES) == ["grid", "optuna", "guided"]
    with pytest.raises(ValueError, match=r"^unknown strategy 'ils'; known: grid, optuna, guided$"):
        get_strategy("ils")


def test_grid_measures_the_warm_starts_then_the_space_in_order():
    calls, _ = search("grid", budget=10_000, warm_start=[DEFAULT])
    assert calls == [DEFAULT, *(c for c in SPACE if c != DEFAULT)]
    assert search("grid", budget=5, warm_start=[])[0] == SPACE[:5]


def test_axes_and_neighbours_of_vllms_space():
    axes = {axis.key: axis for axis in space_axes(SPACE)}
    assert axes["BLOCK_SIZE_M"].values == (16, 32, 64, 128, 256)
    assert axes["num_stages"].values == (2, 3, 4, 5)
    assert axes["GROUP_SIZE_M"].values == (1, 16, 32, 64)
    with pytest.raises(ValueError, match="empty"):
        space_axes([])
    ordered = list(axes.values())
    singles = list(neighbours(DEFAULT, ordered))
    # BLOCK_SIZE_M 32/128, BLOCK_SIZE_N 64/256, BLOCK_SIZE_K 64, GROUP_SIZE_M 16/64,
    # num_warps 8, num_stages 3 (2 is the lowest).
    assert len(singles) == 9 and KernelConfig(32, 128, 128, 32, 4, 2) in singles
    pairs = list(neighbours(DEFAULT, ordered, pairs=True))
    assert pairs[:9] == singles and KernelConfig(32, 256, 128, 32, 4, 2) in pairs
    default = DEFAULT.as_dict()
    assert {sum(c.as_dict()[key] != default[key] for key in default) for c in pairs} == {1, 2}
    anywhere = neighbours(DEFAULT, ordered, categorical=frozenset({"GROUP_SIZE_M"}))
    assert {c.GROUP_SIZE_M for c in anywhere} == {1, 16, 32, 64}


def test_warm_starts_and_related_tasks_are_the_nearest_m_then_the_same_m_of_other_shapes():
    config = {m: SPACE[i] for i, m in enumerate((1, 16, 32, 64, 256, 2048, 4096))}
    other = SPACE[500]
    winners = [(5120, 3072, m, c) for m, c in config.items()]
    winners += [(7168, 5120, 32, other), (7168, 5120, 16, SPACE[600]), (5120, 3072, 32, other)]
    chosen = warm_start_for_task(winners, N=5120, K=3072, M=32, default=DEFAULT)
    # |log2 M - 5|: 16 and 64 at 1, 256 further away. Same M (32) on 7168x5120 follows, once;
    # (5120, 3072, 32) itself is the task and is skipped.
    assert chosen == [DEFAULT, config[16], config[64], other]
    assert warm_start_for_task([(1, 1, 2, DEFAULT)], N=1, K=1, M=1, default=DEFAULT) == [DEFAULT]
    keys = [(256, 512, 1), (256, 512, 32), (256, 512, 16), (512, 256, 16), (1024, 256, 16)]
    timings = {key: [(DEFAULT, float(i + 1))] for i, key in enumerate(keys)}
    # One of each kind: M 32 of the same shape (M 1 is further), the first other shape at M 16.
    assert related((256, 512, 16), timings) == [timings[(256, 512, 32)], timings[(512, 256, 16)]]
    assert related((2048, 2048, 16), {}) == []
