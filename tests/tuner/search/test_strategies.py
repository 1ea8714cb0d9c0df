"""Strategies on a synthetic landscape: budgets, warm start, determinism, failures."""

import math

import pytest

from tuner.core import TrialStatus
from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.space import default_config, vllm_space
from tuner.measure.trial import TrialResult
from tuner.search import STRATEGIES, best, get_strategy

SPACE = vllm_space()
DEFAULT = default_config()


def landscape(config: KernelConfig) -> TrialResult:
    """A smooth made-up latency with its optimum at 32x64x128 g16 w4 s3; BLOCK_SIZE_M=256 with
    8 warps fails, as an out-of-resources config would."""
    if config.BLOCK_SIZE_M == 256 and config.num_warps == 8:
        return TrialResult(TrialStatus.OUT_OF_RESOURCES, error="shared memory")
    latency = (
        10.0
        + 3 * abs(math.log2(config.BLOCK_SIZE_M / 32))
        + 2 * abs(math.log2(config.BLOCK_SIZE_N / 64))
        + (0 if config.BLOCK_SIZE_K == 128 else 1.5)
        + 0.5 * abs(math.log2(config.GROUP_SIZE_M / 16)) / 6
        + (0 if config.num_warps == 4 else 0.7)
        + abs(config.num_stages - 3) * 0.4
    )
    return TrialResult(TrialStatus.OK, latency_us=latency, p20_us=latency, p80_us=latency)


class Recorder:
    def __init__(self):
        self.calls: list[KernelConfig] = []

    def __call__(self, config):
        self.calls.append(config)
        return landscape(config)


def test_registry():
    # The strategies the docs and CLI name are registered, first and in this order; what every
    # registered strategy does on the replay runner is test_strategy_conformance.py's.
    assert list(STRATEGIES)[:6] == ["grid", "optuna", "local", "tpe+local", "ils", "guided"]
    for name, strategy in STRATEGIES.items():
        assert type(get_strategy(name)) is strategy
    known = ", ".join(STRATEGIES)
    with pytest.raises(ValueError) as unknown:
        get_strategy("random")
    assert str(unknown.value) == f"unknown strategy 'random'; known: {known}"


def test_grid_evaluates_warm_start_then_every_config_once():
    recorder = Recorder()
    history = get_strategy("grid").search(
        recorder, space=SPACE, budget=10_000, seed=0, warm_start=[DEFAULT]
    )
    assert recorder.calls[0] == DEFAULT
    assert len(recorder.calls) == len(set(recorder.calls)) == 1280
    winner, result = best(history)
    assert winner == KernelConfig(32, 64, 128, 16, 4, 3)
    assert result.latency_us == pytest.approx(10.0)


def test_grid_budget_caps():
    recorder = Recorder()
    get_strategy("grid").search(recorder, space=SPACE, budget=5, seed=0)
    assert recorder.calls == SPACE[:5]


def test_optuna_budget_warm_start_and_determinism():
    first, second = Recorder(), Recorder()
    history = get_strategy("optuna").search(
        first, space=SPACE, budget=40, seed=7, warm_start=[DEFAULT]
    )
    get_strategy("optuna").search(second, space=SPACE, budget=40, seed=7, warm_start=[DEFAULT])
    assert first.calls[0] == DEFAULT
    assert len(first.calls) == len(set(first.calls)) == 40 == len(history)
    assert first.calls == second.calls  # same seed, same sequence: resumable and replayable
    assert set(first.calls) <= set(SPACE)
    third = Recorder()
    get_strategy("optuna").search(third, space=SPACE, budget=40, seed=8, warm_start=[DEFAULT])
    assert third.calls != first.calls


def test_optuna_beats_the_default_on_a_smooth_landscape():
    history = get_strategy("optuna").search(
        Recorder(), space=SPACE, budget=60, seed=0, warm_start=[DEFAULT]
    )
    _, result = best(history)
    assert result.latency_us < landscape(DEFAULT).latency_us
    assert result.latency_us <= 11.5  # within 15% of the optimum (10.0) after 60 of 1,280


def test_optuna_on_a_small_explicit_list_stops_at_its_size():
    space = SPACE[:3]
    recorder = Recorder()
    history = get_strategy("optuna").search(recorder, space=space, budget=10, seed=0)
    assert sorted(recorder.calls) == sorted(space)
    assert len(history) == 3


def test_best_ignores_failures():
    failed = TrialResult(TrialStatus.WRONG_RESULT, rel_error=0.5)
    ok = TrialResult(TrialStatus.OK, latency_us=5.0)
    assert best([(DEFAULT, failed)]) is None
    assert best([(SPACE[0], failed), (DEFAULT, ok)]) == (DEFAULT, ok)
