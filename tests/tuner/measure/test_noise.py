"""Noise control: interleaved re-timing with a scripted sampler, and the winner rule."""

import pytest

from tuner.core import TrialStatus
from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.space import default_config
from tuner.measure.landscape import RecordedTimings
from tuner.measure.noise import (
    RETIME_ROUNDS,
    RETIME_TOP,
    Decision,
    Retime,
    decide_winner,
    retime_interleaved,
    select_for_retime,
    simplicity,
)
from tuner.measure.trial import TrialResult

DEFAULT = default_config()  # 64x128x128 g32 w4 s2
FAST = KernelConfig(128, 128, 128, 1, 8, 4)
NEXT = KernelConfig(64, 128, 128, 16, 4, 3)
SMALL = KernelConfig(64, 64, 128, 1, 4, 3)


class ScriptedSampler:
    """Answers each config's samples in the order given, and records the order of the calls."""

    def __init__(self, samples_us):
        self.samples_us = {config: list(values) for config, values in samples_us.items()}
        self.calls = []

    def __call__(self, config):
        self.calls.append(config)
        return self.samples_us[config].pop(0)


def around(median_us):
    """Five samples 1 us apart around a median: p20 = median - 1.2, p80 = median + 1.2."""
    return [median_us + offset for offset in (1.0, -2.0, 0.0, 2.0, -1.0)]


def test_interleaved_order_rotates_the_start_and_results_keep_the_input_order():
    a, b, c = FAST, NEXT, SMALL
    sampler = ScriptedSampler({a: around(30.0), b: around(10.0), c: around(20.0)})
    retimes = retime_interleaved(sampler, [a, b, c], rounds=5)
    assert sampler.calls == [a, b, c, b, c, a, c, a, b, a, b, c, b, c, a]
    assert [r.config for r in retimes] == [a, b, c]
    assert [(r.latency_us, r.rounds) for r in retimes] == [(30.0, 5), (10.0, 5), (20.0, 5)]
    assert (retimes[1].p20_us, retimes[1].p80_us) == pytest.approx((8.8, 11.2))


@pytest.mark.parametrize(
    ("configs", "rounds", "message"),
    [
        ([], 5, "no configs"),
        ([FAST, NEXT, FAST], 5, "listed twice"),
        ([FAST], 1, "at least 2 rounds, got 1"),
    ],
)
def test_retime_rejects(configs, rounds, message):
    with pytest.raises(ValueError, match=message):
        retime_interleaved(lambda config: 1.0, configs, rounds=rounds)


def decide(medians_us, default=DEFAULT):
    sampler = ScriptedSampler({config: around(m) for config, m in medians_us.items()})
    return decide_winner(retime_interleaved(sampler, list(medians_us), rounds=5), default)


def test_a_clearly_faster_config_wins():
    decision = decide({DEFAULT: 20.0, FAST: 12.0, NEXT: 17.0})
    assert decision == Decision(
        config=FAST,
        latency_us=12.0,
        default_latency_us=20.0,
        runner_up=NEXT,
        spread_us=pytest.approx(2.4),
        kept="fastest",
        note="beats runner-up 64x128x128 g16 w4 s3 by 5.0 us > spread 2.4 us",
    )


def test_within_the_noise_the_default_is_kept():
    decision = decide({DEFAULT: 14.0, FAST: 12.0, NEXT: 30.0})
    assert (decision.config, decision.latency_us, decision.kept) == (DEFAULT, 14.0, "default")
    assert (decision.runner_up, decision.default_latency_us) == (DEFAULT, 14.0)
    assert decision.spread_us == pytest.approx(2.4)
    assert decision.note == (
        "128x128x128 g1 w8 s4 leads runner-up 64x128x128 g32 w4 s2 by only "
        "2.0 us <= spread 2.4 us; kept the default"
    )


def test_without_the_default_among_the_tied_the_simplest_is_kept():
    # FAST, NEXT and SMALL are within 2.4 us of FAST; the default is far behind.
    decision = decide({DEFAULT: 20.0, FAST: 12.0, NEXT: 13.0, SMALL: 14.0})
    assert (decision.config, decision.latency_us, decision.kept) == (SMALL, 14.0, "simpler")
    assert (decision.runner_up, decision.default_latency_us) == (NEXT, 20.0)
    assert decision.note == (
        "128x128x128 g1 w8 s4 leads runner-up 64x128x128 g16 w4 s3 by only "
        "1.0 us <= spread 2.4 us; kept the simplest of 3 within the spread"
    )


def test_a_single_config_is_kept_with_its_own_spread():
    retime = Retime(FAST, 12.0, 11.0, 12.5, rounds=12)
    assert decide_winner([retime], DEFAULT) == Decision(
        FAST, 12.0, None, None, 1.5, "fastest", "only candidate; spread 1.5 us"
    )
    with pytest.raises(ValueError, match="no re-timed configs"):
        decide_winner([], DEFAULT)
    with pytest.raises(ValueError, match="re-timed twice"):
        decide_winner([retime, retime], DEFAULT)


def test_equal_medians_fall_to_config_order_and_the_larger_spread_counts():
    narrow = Retime(NEXT, 10.0, 10.0, 10.0, rounds=2)
    wide = Retime(SMALL, 10.0, 9.0, 12.0, rounds=2)
    decision = decide_winner([narrow, wide], DEFAULT)
    # SMALL < NEXT in KernelConfig order, so SMALL ranks first; the spread is SMALL's 3 us
    assert (decision.runner_up, decision.spread_us) == (NEXT, 3.0)
    # both tied, no default: the simpler by tile size (64x64x128 < 64x128x128)
    assert (decision.config, decision.kept) == (SMALL, "simpler")


def test_simplicity_order():
    configs = [
        KernelConfig(16, 32, 64, 1, 8, 2),
        KernelConfig(128, 128, 128, 64, 4, 2),
        KernelConfig(16, 32, 64, 1, 4, 3),
        KernelConfig(32, 32, 64, 1, 4, 2),
        KernelConfig(32, 16, 64, 1, 4, 2),
    ]
    assert sorted(configs, key=simplicity) == [
        KernelConfig(32, 16, 64, 1, 4, 2),
        KernelConfig(32, 32, 64, 1, 4, 2),
        KernelConfig(128, 128, 128, 64, 4, 2),
        KernelConfig(16, 32, 64, 1, 8, 2),
        KernelConfig(16, 32, 64, 1, 4, 3),
    ]


def ok(latency_us):
    return TrialResult(TrialStatus.OK, latency_us, latency_us - 0.5, latency_us + 0.5)


def test_select_the_fastest_ok_and_the_default_first():
    a, b, c, d = (KernelConfig(16, 64, 128, g, 4, 2) for g in (1, 16, 32, 64))
    results = {
        a: ok(9.0),
        b: ok(8.0),
        c: ok(8.0),
        d: ok(12.0),
        DEFAULT: ok(10.0),
        KernelConfig(256, 256, 128, 1, 8, 5): TrialResult(TrialStatus.OUT_OF_RESOURCES),
    }
    assert RETIME_TOP == 3
    assert select_for_retime(results, DEFAULT) == [DEFAULT, b, c, a]  # b, c tie: config order
    assert select_for_retime(results, DEFAULT, top=4) == [DEFAULT, b, c, a]  # default is 4th
    assert select_for_retime(results, DEFAULT, top=1) == [DEFAULT, b]
    results[DEFAULT] = TrialResult(TrialStatus.WRONG_RESULT, error="relative error 0.5")
    assert select_for_retime(results, DEFAULT, top=2) == [b, c]
    assert select_for_retime({}, DEFAULT) == []
    with pytest.raises(ValueError, match="top must be at least 1"):
        select_for_retime(results, DEFAULT, top=0)


def test_retime_on_a_replay_runner_is_reproducible_and_ties_go_to_the_simpler():
    runner = RecordedTimings({DEFAULT: ok(20.0), FAST: ok(10.0), NEXT: ok(10.2), SMALL: ok(30.0)})
    configs = select_for_retime(runner.trials, DEFAULT)
    assert configs == [DEFAULT, FAST, NEXT]
    retimes = retime_interleaved(runner.sample_us, configs)
    assert [r.rounds for r in retimes] == [RETIME_ROUNDS] * 3
    for retime, recorded in zip(retimes, (20.0, 10.0, 10.2), strict=True):
        assert recorded - 0.5 <= retime.p20_us <= retime.latency_us <= retime.p80_us
        assert retime.p80_us <= recorded + 0.5
    decision = decide_winner(retimes, DEFAULT)
    # FAST and NEXT overlap within their recorded [p20, p80]; the default is far behind
    assert (decision.config, decision.kept, decision.default_latency_us) == (
        NEXT,
        "simpler",
        retimes[0].latency_us,
    )
    assert decision.note.endswith(
        "by only 0.4 us <= spread 0.7 us; kept the simplest of 2 within the spread"
    )
    assert (
        decide_winner(
            retime_interleaved(RecordedTimings(runner.trials).sample_us, configs), DEFAULT
        )
        == decision
    )
