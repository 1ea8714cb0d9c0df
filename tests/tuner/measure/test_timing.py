"""Timing plans and the sampling loop, on a fake clock: exact per-launch numbers, copies in turn."""

import pytest

from tuner.measure.timing import (
    MAX_LAUNCHES,
    MAX_SAMPLES,
    Sampler,
    TimingPlan,
    WallTimer,
    copies_for,
    cuda_plan,
    interpreter_plan,
    percentiles,
)


def test_percentiles():
    assert percentiles([7.0]) == (7.0, 7.0, 7.0)
    assert percentiles([5.0, 1.0, 3.0, 2.0, 4.0]) == pytest.approx((3.0, 1.8, 4.2))
    with pytest.raises(ValueError, match="no samples"):
        percentiles([])


def test_copies_hold_twice_the_l2():
    assert copies_for(1000, 10_000) == 20
    assert copies_for(7000, 10_000) == 3  # 2 copies hold 14,000 < 20,000 bytes
    assert copies_for(30_000, 10_000) == 2  # one would do, but a copy must rest between reads
    assert copies_for(1000, 0) == 2
    with pytest.raises(ValueError, match="bad sizes"):
        copies_for(0, 10_000)


@pytest.mark.parametrize(
    ("copy_bytes", "launch_s", "plan"),
    [
        # 7.6 us launches: 132 fill 1 ms, rounded up to a multiple of the 20 copies
        (1000, 2**-17, TimingPlan(copies=20, launches=140, warmup=24, samples=94)),
        # 205 copies at 11 launches per graph: 19 graphs, 209 copies
        (98, 2**-10 / 10, TimingPlan(copies=209, launches=11, warmup=24, samples=94)),
        # 3 copies, 10 launches rounded up to 12
        (7000, 1e-4, TimingPlan(copies=3, launches=12, warmup=21, samples=84)),
        # a 10 ms kernel: one launch per sample, 2 graphs, MIN_SAMPLES, one replay of each graph
        # plus one more for the 25 ms warmup
        (10**9, 0.01, TimingPlan(copies=2, launches=1, warmup=3, samples=10)),
        # a 10 ns estimate hits the caps
        (
            1000,
            1e-8,
            TimingPlan(copies=20, launches=MAX_LAUNCHES, warmup=2500, samples=MAX_SAMPLES),
        ),
    ],
)
def test_cuda_plan(copy_bytes, launch_s, plan):
    assert cuda_plan(copy_bytes=copy_bytes, l2_bytes=10_000, launch_s=launch_s) == plan
    assert plan.copies * copy_bytes >= 2 * 10_000


def test_cuda_plan_rejects_bad_durations():
    with pytest.raises(ValueError, match="bad durations"):
        cuda_plan(copy_bytes=1000, l2_bytes=10_000, launch_s=0.0)


def test_copy_order_reads_every_copy_in_turn():
    many = TimingPlan(copies=6, launches=3, warmup=0, samples=1)
    assert many.batches == 2
    assert [many.copy_order(b) for b in range(2)] == [(0, 1, 2), (3, 4, 5)]
    few = TimingPlan(copies=2, launches=4, warmup=0, samples=1)
    assert few.batches == 1
    assert few.copy_order(0) == (0, 1, 0, 1)
    with pytest.raises(ValueError, match="batch 2 not in"):
        many.copy_order(2)
    with pytest.raises(ValueError, match="neither is a multiple"):
        TimingPlan(copies=4, launches=6, warmup=0, samples=1)
    with pytest.raises(ValueError, match="bad timing plan"):
        TimingPlan(copies=2, launches=1, warmup=0, samples=0)
    assert interpreter_plan(3) == TimingPlan(copies=2, launches=1, warmup=0, samples=3)
    with pytest.raises(ValueError, match="reps must be >= 1"):
        interpreter_plan(0)


class FakeDevice:
    """A clock that only the fake work moves: each launch of copy c takes durations_s[c]."""

    def __init__(self, durations_s):
        self.now = 0.0
        self.durations_s = durations_s
        self.launched = []

    def clock(self):
        return self.now

    def launch(self, copy):
        self.launched.append(copy)
        self.now += self.durations_s[copy]


def test_sampler_times_only_the_batch_per_launch_and_rotates():
    device = FakeDevice([2**-13, 2**-13, 3 * 2**-13, 3 * 2**-13])
    plan = TimingPlan(copies=4, launches=2, warmup=1, samples=3)

    def run_batch(batch):
        for copy in plan.copy_order(batch):
            device.launch(copy)

    sampler = Sampler(plan, run_batch, WallTimer(device.clock))
    device.now += 50.0  # copies, graph capture: before any timed region
    sampler.warm()
    assert device.launched == [0, 1]
    device.now += 50.0  # the warmup's 2**-12 s and this do not count either
    samples = sampler.samples_s()
    # warmup took batch 0, so the samples take batches 1, 0, 1
    assert device.launched == [0, 1, 2, 3, 0, 1, 2, 3]
    assert samples == [3 * 2**-13, 2**-13, 3 * 2**-13]
    assert sampler.sample_s() == 2**-13  # one more sample goes on with batch 0
