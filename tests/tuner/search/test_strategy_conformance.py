"""Conformance: every registered strategy, on the replay runner, keeps the Strategy contract."""

import math

import pytest

from tuner.core import TrialStatus
from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.space import default_config, vllm_space
from tuner.measure.landscape import landscape_from_results
from tuner.measure.trial import TrialResult
from tuner.search import STRATEGIES, best, get_strategy, planned

SPACE = vllm_space()
DEFAULT = default_config()
NAMES = sorted(STRATEGIES)
# Warm starts as a worker passes them: the default, then winners of other tasks.
WARM = [DEFAULT, KernelConfig(16, 64, 128, 1, 4, 5), KernelConfig(128, 128, 128, 16, 8, 3)]


def synthetic(config: KernelConfig) -> TrialResult:
    """A bumpy made-up latency; about one config in six fails (out of resources, wrong result,
    compile error), and BLOCK_SIZE_N=32 with 8 warps is not recorded at all (the runner answers
    invalid)."""
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
    results = []
    for config in SPACE:
        if config.BLOCK_SIZE_N == 32 and config.num_warps == 8:
            continue
        result = synthetic(config)
        if fail_all:
            result = TrialResult(TrialStatus.CRASHED, error="crashed")
        results.append((512, 1024, 16, config, result))
    landscape = landscape_from_results(
        device_name="NVIDIA_L20",
        environment={},
        recorded_at="2026-11-30T00:00:00Z",
        space="vllm",
        out_dtype="bfloat16",
        block_shape=(128, 128),
        results=results,
    )
    return landscape.runner(512, 1024, 16)


class Recorder:
    """evaluate() that answers from a replay runner and remembers every call."""

    def __init__(self, runner):
        self.runner, self.calls = runner, []

    def __call__(self, config):
        self.calls.append(config)
        return self.runner.evaluate(config)


def counted(name, calls, runner=None):
    """Calls that count against the budget: all, except the statuses a strategy declares free
    (`ils`: configs pruned before launch)."""
    free = getattr(get_strategy(name), "free", frozenset())
    runner = runner or make_runner()
    return sum(runner.evaluate(config).status not in free for config in calls)


def search(name, budget=40, seed=3, space=SPACE, warm_start=WARM, runner=None):
    recorder = Recorder(runner or make_runner())
    history = get_strategy(name).search(
        recorder, space=space, budget=budget, seed=seed, warm_start=warm_start
    )
    return recorder, history


@pytest.mark.parametrize("name", NAMES)
def test_budget_distinct_configs_and_history(name):
    recorder, history = search(name)
    assert len(recorder.calls) == len(set(recorder.calls))
    assert counted(name, recorder.calls) == 40
    if not getattr(get_strategy(name), "free", None):  # ils and guided: pruned configs free
        assert len(recorder.calls) == 40
    assert [config for config, _ in history] == recorder.calls
    runner = make_runner()
    assert all(result == runner.evaluate(config) for config, result in history)


@pytest.mark.parametrize("name", NAMES)
def test_warm_start_first_in_order_and_deduplicated(name):
    outside = KernelConfig(64, 128, 128, 32, 2, 2)  # 2 warps: not in vLLM's space
    recorder, _ = search(name, warm_start=[WARM[1], outside, WARM[0], WARM[1], WARM[2]])
    assert recorder.calls[:3] == [WARM[1], WARM[0], WARM[2]]
    assert outside not in recorder.calls


@pytest.mark.parametrize("name", NAMES)
def test_deterministic_per_seed(name):
    first, _ = search(name, seed=11)
    second, _ = search(name, seed=11)
    assert first.calls == second.calls
    if name != "grid":  # the grid's order does not depend on the seed
        other, _ = search(name, seed=12)
        assert other.calls != first.calls


@pytest.mark.parametrize("name", NAMES)
def test_only_configs_of_the_space(name):
    subspace = [c for c in SPACE if c.BLOCK_SIZE_K == 128 and c.num_stages in (3, 4)]
    recorder, _ = search(name, space=subspace)
    assert counted(name, recorder.calls) == 40
    assert set(recorder.calls) <= set(subspace)
    assert DEFAULT not in recorder.calls  # a warm start outside the space (2 stages)


@pytest.mark.parametrize("name", NAMES)
def test_failures_tolerated(name):
    recorder, history = search(name, budget=64)
    statuses = {result.status for _, result in history}
    assert TrialStatus.OK in statuses and len(statuses) > 1  # it met failures and went on
    assert counted(name, [config for config, _ in history]) == 64
    winner, result = best(history)
    assert result.latency_us == min(r.latency_us for _, r in history if r.ok)
    assert result.latency_us <= make_runner().evaluate(DEFAULT).latency_us


@pytest.mark.parametrize("name", NAMES)
def test_everything_failing_spends_the_budget_and_has_no_winner(name):
    runner = make_runner(fail_all=True)
    recorder, history = search(name, budget=24, runner=runner)
    assert len(recorder.calls) == len(set(recorder.calls))
    # Every call counts but the unrecorded configs (invalid: free for ils and guided).
    assert counted(name, recorder.calls, runner) == 24 <= len(recorder.calls)
    assert best(history) is None


@pytest.mark.parametrize("name", NAMES)
def test_budget_beyond_the_space_measures_each_config_once(name):
    small = SPACE[:5]
    recorder, history = search(name, budget=50, space=small, warm_start=[small[3]])
    assert recorder.calls[0] == small[3]
    assert sorted(recorder.calls) == sorted(small)
    assert len(history) == 5


@pytest.mark.parametrize("name", NAMES)
def test_zero_budget_measures_nothing(name):
    recorder, history = search(name, budget=0)
    assert recorder.calls == [] and history == []


@pytest.mark.parametrize("budget", [5, 40])
@pytest.mark.parametrize("name", NAMES)
def test_what_a_strategy_plans_is_what_it_measures_first(name, budget):
    """`planned` (what the compile pool prepares ahead of the GPU) is a prefix of the history,
    with failures and pruned configs among the trials."""
    strategy = get_strategy(name)
    warm = [*WARM, KernelConfig(512, 64, 128, 1, 4, 2)]  # not in the space: never planned
    plan = planned(strategy, space=SPACE, budget=budget, seed=11, warm_start=warm)
    history = get_strategy(name).search(
        Recorder(make_runner()), space=SPACE, budget=budget, seed=11, warm_start=warm
    )
    assert [config for config, _ in history[: len(plan)]] == plan
    # 3 warm starts, then the tile batch: 20 tiles (ils), one of them the default; grid: the
    # whole space; the others (guided tries its tiles between steps): the warm starts alone.
    fixed_start = {"grid": len(SPACE), "ils": 3 + 20 - 1}
    assert len(plan) == min(budget, fixed_start.get(name, len(WARM)))
