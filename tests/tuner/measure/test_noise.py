"""Timing plans; interleaved re-timing and the winner
rule (tuner.measure.noise)."""

import pytest

from tuner.core import TrialStatus
from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.space import default_config
from tuner.measure.noise import (
    MAX_LAUNCHES,
    MAX_SAMPLES,
    RETIME_ROUNDS,
    Decision,
    Retime,
    TimingPlan,
    cuda_plan,
    decide_winner,
    interpreter_plan,
    percentiles,
    retime_interleaved,
    select_for_retime,
    simplicity,
)
from tuner.measure.trial import TrialResult

DEFAULT = default_config()  # 64x128x128 g32 w4 s2
FAST = KernelConfig(128, 128, 128, 1, 8, 4)
NEXT = KernelConfig(64, 128, 128, 16, 4, 3)
SMALL = KernelConfig(64, 64, 128, 1, 4, 3)


@pytest.mark.parametrize(
    ("copy_bytes", "launch_s", "plan"),
    [
        # 7.6 us launches: 132 fill 1 ms, rounded up to a multiple of the 20 copies
        (1000, 2**-17, TimingPlan(copies=20, launches=140, warmup=24, samples=94)),
        # 205 copies at 11 launches per graph: 19 graphs, 209 copies
        (98, 2**-10 / 10, TimingPlan(copies=209, launches=11, warmup=24, samples=94)),
        # 2 copies hold 14,000 < 20,000 bytes: 3; 10 launches rounded up to 12
        (7000, 1e-4, TimingPlan(copies=3, launches=12, warmup=21, samples=84)),
        # a 10 ms kernel: one launch per sample, at least 2 copies (one alone would fit L2 but a
        # copy must rest between reads), MIN_SAMPLES, a replay of each graph plus one
        (10**9, 0.01, TimingPlan(copies=2, launches=1, warmup=3, samples=10)),
        # a 10 ns estimate hits the caps
        (1000, 1e-8, TimingPlan(20, MAX_LAUNCHES, warmup=2500, samples=MAX_SAMPLES)),
    ],
)
def test_cuda_plan(copy_bytes, launch_s, plan):
    assert cuda_plan(copy_bytes=copy_bytes, l2_bytes=10_000, launch_s=launch_s) == plan
    assert plan.copies * copy_bytes >= 2 * 10_000


def test_copy_order_reads_every_copy_in_turn_and_one_sample_is_its_own_percentiles():
    """More launches than copies (the copies of batches over several graphs: test_measure.py)."""
    few = TimingPlan(copies=2, launches=4, warmup=0, samples=1)
    assert (few.batches, few.copy_order(0)) == (1, (0, 1, 0, 1))
    assert interpreter_plan(3) == TimingPlan(copies=2, launches=1, warmup=0, samples=3)
    assert percentiles([7.0]) == (7.0, 7.0, 7.0)
    with pytest.raises(ValueError):
        percentiles([])


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
    assert [(r.config, r.latency_us, r.rounds) for r in retimes] == [
        (a, 30.0, 5),
        (b, 10.0, 5),
        (c, 20.0, 5),
    ]
    assert (retimes[1].p20_us, retimes[1].p80_us) == pytest.approx((8.8, 11.2))
    assert [r.rounds for r in retime_interleaved(lambda config: 1.0, [a, b])] == [RETIME_ROUNDS] * 2
    for configs, rounds in (([], 5), ([FAST, NEXT, FAST], 5), ([FAST], 1)):
        with pytest.raises(ValueError, match="cannot re-time"):
            retime_interleaved(lambda config: 1.0, configs, rounds=rounds)


@pytest.mark.parametrize(
    ("medians_us", "kept", "runner_up", "note"),
    [
        (
            {DEFAULT: 20.0, FAST: 12.0, NEXT: 17.0},
            (FAST, 12.0, "fastest"),
            NEXT,
            "beats runner-up 64x128x128 g16 w4 s3 by 5.0 us > spread 2.4 us",
        ),
        (
            {DEFAULT: 14.0, FAST: 12.0, NEXT: 30.0},
            (DEFAULT, 14.0, "default"),
            DEFAULT,
            "128x128x128 g1 w8 s4 leads runner-up 64x128x128 g32 w4 s2 by only "
            "2.0 us <= spread 2.4 us; kept the default",
        ),
        (  # FAST, NEXT and SMALL within 2.4 us of FAST, the default far behind
            {DEFAULT: 20.0, FAST: 12.0, NEXT: 13.0, SMALL: 14.0},
            (SMALL, 14.0, "simpler"),
            NEXT,
            "128x128x128 g1 w8 s4 leads runner-up 64x128x128 g16 w4 s3 by only "
            "1.0 us <= spread 2.4 us; kept the simplest of 3 within the spread",
        ),
    ],
)
def test_the_winner_rule(medians_us, kept, runner_up, note):
    sampler = ScriptedSampler({config: around(m) for config, m in medians_us.items()})
    retimes = retime_interleaved(sampler, list(medians_us), rounds=5)
    config, latency_us, how = kept
    assert decide_winner(retimes, DEFAULT) == Decision(
        config, latency_us, medians_us[DEFAULT], runner_up, pytest.approx(2.4), how, note
    )


def test_a_single_config_is_kept_with_its_own_spread_and_equal_medians_fall_to_config_order():
    retime = Retime(FAST, 12.0, 11.0, 12.5, rounds=12)
    assert decide_winner([retime], DEFAULT) == Decision(
        FAST, 12.0, None, None, 1.5, "fastest", "only candidate; spread 1.5 us"
    )
    narrow = Retime(NEXT, 10.0, 10.0, 10.0, rounds=2)
    wide = Retime(SMALL, 10.0, 9.0, 12.0, rounds=2)
    decision = decide_winner([narrow, wide], DEFAULT)
    # SMALL < NEXT in KernelConfig order ranks first; the spread is SMALL's 3 us; both tied, no
    # default: the simpler by tile size
    assert (decision.config, decision.kept, decision.runner_up, decision.spread_us) == (
        SMALL,
        "simpler",
        NEXT,
        3.0,
    )


def test_simplicity_order():
    configs = [
        KernelConfig(16, 32, 64, 1, 8, 2),
        KernelConfig(128, 128, 128, 64, 4, 2),
        KernelConfig(16, 32, 64, 1, 4, 3),
        KernelConfig(32, 32, 64, 1, 4, 2),
        KernelConfig(32, 16, 64, 1, 4, 2),
    ]
    assert sorted(configs, key=simplicity) == [configs[i] for i in (4, 3, 1, 0, 2)]


def ok(latency_us):
    return TrialResult(TrialStatus.OK, latency_us, latency_us - 0.5, latency_us + 0.5)


def test_select_the_fastest_ok_and_the_default_first():
    a, b, c, d = (KernelConfig(16, 64, 128, g, 4, 2) for g in (1, 16, 32, 64))
    results = {a: ok(9.0), b: ok(8.0), c: ok(8.0), d: ok(12.0), DEFAULT: ok(10.0)}
    results[KernelConfig(256, 256, 128, 1, 8, 5)] = TrialResult(TrialStatus.OUT_OF_RESOURCES)
    assert select_for_retime(results, DEFAULT) == [DEFAULT, b, c, a]  # b, c tie: config order
    assert select_for_retime(results, DEFAULT, top=1) == [DEFAULT, b]
    results[DEFAULT] = TrialResult(TrialStatus.WRONG_RESULT, error="relative error 0.5")
    assert select_for_retime(results, DEFAULT, top=2) == [b, c]
    assert select_for_retime({}, DEFAULT) == []
