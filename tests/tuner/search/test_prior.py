"""The cross-task prior: which earlier tasks a task learns from, the fit, and the order it gives
`guided`'s steps."""

from __future__ import annotations

import math
import random

from tests.tuner.search.test_guided import ADDITIVE_OPTIMUM, AXES, DEFAULT, FACTORS, SPACE
from tuner.core import TrialStatus
from tuner.kernels.config import KernelConfig
from tuner.measure.trial import TrialResult
from tuner.search import get_strategy
from tuner.search.axes import neighbours
from tuner.search.budget import BudgetedEvaluate
from tuner.search.features import features
from tuner.search.guided import CATEGORICAL, RIDGE
from tuner.search.local import neighbourhood_order
from tuner.search.prior import fit_prior, related

X = features(SPACE, AXES)


def timed(scale: float, configs) -> list[tuple[KernelConfig, float]]:
    """The log-additive landscape of test_guided, `scale` times slower."""
    return [
        (c, scale * 10.0 * math.prod(FACTORS[k][v] for k, v in c.as_dict().items()))
        for c in configs
    ]


def test_a_task_learns_from_the_nearest_m_of_its_shape_and_the_same_m_of_other_shapes():
    keys = [
        (256, 512, 1),
        (256, 512, 32),
        (256, 512, 256),
        (256, 512, 16),
        (512, 256, 16),
        (1024, 256, 16),
        (512, 256, 1),
    ]
    timings = {key: [(DEFAULT, float(i + 1))] for i, key in enumerate(keys)}
    label = {id(t): key for key, t in timings.items()}
    found = related((256, 512, 16), timings, max_neighbours=1, max_same_m_others=1)
    assert [label[id(t)] for t in found] == [(256, 512, 32), (512, 256, 16)]
    found = related((256, 512, 16), timings, max_neighbours=3, max_same_m_others=5)
    # M 1 and 256 are both 4 steps of log2 from 16: the smaller first.
    assert [label[id(t)] for t in found] == [
        (256, 512, 32),
        (256, 512, 1),
        (256, 512, 256),
        (512, 256, 16),
        (1024, 256, 16),
    ]
    assert related((2048, 2048, 16), {}, max_neighbours=1) == []


def test_the_prior_of_two_tasks_at_different_scales_ranks_their_landscape():
    rng = random.Random(0)
    tasks = [timed(1.0, rng.sample(SPACE, 300)), timed(5.0, rng.sample(SPACE, 300))]
    prior = fit_prior(SPACE, X, tasks, RIDGE)
    assert prior is not None and min(prior, key=prior.__getitem__) == ADDITIVE_OPTIMUM
    # One axis apart: the predicted difference is the landscape's factor (5 stages: 1.15).
    stages_5 = KernelConfig(**{**ADDITIVE_OPTIMUM.as_dict(), "num_stages": 5})
    assert abs(prior[stages_5] - prior[ADDITIVE_OPTIMUM] - math.log(1.15)) < 0.01


def test_a_config_timed_twice_counts_once_at_its_fastest_and_eight_trials_are_needed():
    configs = random.Random(1).sample(SPACE, 40)
    once = timed(1.0, configs)
    twice = once + [(c, 3 * latency) for c, latency in once[:10]]
    assert fit_prior(SPACE, X, [twice], RIDGE) == fit_prior(SPACE, X, [once], RIDGE)
    assert fit_prior(SPACE, X, [once[:7]], RIDGE) is None
    # Configs outside the space are skipped, and a task with one usable trial says nothing.
    outside = KernelConfig(8, 8, 8, 8, 8, 8)
    assert fit_prior(SPACE, X, [once[:8] + [(outside, 1.0)], once[8:9]], RIDGE) == fit_prior(
        SPACE, X, [once[:8]], RIDGE
    )


def test_with_a_prior_a_centres_neighbours_go_fastest_predicted_first_after_its_pattern_move():
    tracker = BudgetedEvaluate(lambda c: TrialResult(TrialStatus.OK, 1.0), SPACE, 100)
    prior = {c: float(i) for i, c in enumerate(random.Random(2).sample(SPACE, len(SPACE)))}
    seeded = neighbourhood_order(DEFAULT, AXES, tracker, random.Random(3), {}, CATEGORICAL)
    ordered = neighbourhood_order(DEFAULT, AXES, tracker, random.Random(3), {}, CATEGORICAL, prior)
    singles = [c for c in neighbours(DEFAULT, AXES, categorical=CATEGORICAL) if c in SPACE]
    assert ordered == (
        sorted(singles, key=prior.__getitem__)
        + sorted(seeded[len(singles) :], key=prior.__getitem__)
    )
    # A prior that ranks nothing apart leaves the seeded order (the same random draws).
    assert (
        neighbourhood_order(
            DEFAULT, AXES, tracker, random.Random(3), {}, CATEGORICAL, dict.fromkeys(SPACE, 0.0)
        )
        == seeded
    )
    # A centre reached by a move still tries that move again first.
    centre = KernelConfig(**{**DEFAULT.as_dict(), "num_stages": 3})
    moves = {centre: (0, 0, 0, 0, 0, 1)}
    ahead = KernelConfig(**{**DEFAULT.as_dict(), "num_stages": 4})
    assert (
        neighbourhood_order(centre, AXES, tracker, random.Random(3), moves, CATEGORICAL, prior)[0]
        == ahead
    )


def test_guided_steps_first_to_the_neighbour_the_related_tasks_predict_fastest():
    rng = random.Random(4)
    earlier = [timed(1.0, rng.sample(SPACE, 128)), timed(2.0, rng.sample(SPACE, 128))]
    prior = fit_prior(SPACE, X, earlier, RIDGE)
    assert prior is not None
    expected = min(
        (c for c in neighbours(DEFAULT, AXES, categorical=CATEGORICAL) if c in SPACE),
        key=prior.__getitem__,
    )
    flat = lambda config: TrialResult(TrialStatus.OK, 10.0)  # noqa: E731
    for seed in range(3):
        history = get_strategy("guided").search(
            flat, space=SPACE, budget=2, seed=seed, warm_start=[DEFAULT], related=earlier
        )
        assert [c for c, _ in history] == [DEFAULT, expected]
    # Without related tasks the first step is drawn by the seed.
    drawn = {
        get_strategy("guided").search(flat, space=SPACE, budget=2, seed=seed, warm_start=[DEFAULT])[
            1
        ][0]
        for seed in range(3)
    }
    assert len(drawn) > 1
