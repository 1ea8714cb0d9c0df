"""Best-first neighbourhood search over the ordered axes of a config space, from warm starts."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from tuner.kernels.config import KernelConfig
from tuner.search.axes import Axis, neighbours, space_axes
from tuner.search.base import Evaluate, History, Strategy
from tuner.search.budget import BudgetedEvaluate


def run_local(tracker: BudgetedEvaluate, axes: Sequence[Axis], *, seed: int, stop_at: int) -> None:
    """Measure neighbours of the best configs so far until `stop_at` distinct configs ran.

    Each step takes the fastest ok config that still has an unmeasured neighbour in the space
    and measures one of them: first the one-step neighbours (one axis one value up or down; on
    a log2 axis, half or double), then the two-axis diagonal ones. So the search climbs from the
    incumbent, and when the incumbent's neighbourhood is spent it widens around the runners-up.
    A config reached by a move is tried with the same move again first (a pattern move, as in
    Hooke and Jeeves' pattern search); the other neighbours follow in a seeded random order.
    With no ok config yet, it measures a random unmeasured config of the space.

    Args:
        tracker: the shared, budgeted evaluate (warm starts already measured in it).
        axes: the axes of the space.
        seed: seed of the order among neighbours and of random picks.
        stop_at: configs counted against the budget (`tracker.spent`) when the search stops
            (at most the budget).
    """
    rng = random.Random(seed)
    ordered_space = sorted(tracker.allowed)
    stop_at = min(stop_at, tracker.budget)
    # Unmeasured neighbours per centre, in the order they will be tried (built on first use),
    # and the move (axis index deltas) that first reached a config from its centre.
    queues: dict[KernelConfig, list[KernelConfig]] = {}
    moves: dict[KernelConfig, tuple[int, ...]] = {}
    while tracker.spent < stop_at and len(tracker.results) < len(tracker.allowed):
        candidate = best_first_step(tracker, axes, rng, queues, moves)
        if candidate is None:
            unmeasured = [c for c in ordered_space if c not in tracker.results]
            if not unmeasured:
                return
            candidate = rng.choice(unmeasured)
        tracker(candidate)


def best_first_step(
    tracker: BudgetedEvaluate,
    axes: Sequence[Axis],
    rng: random.Random,
    queues: dict[KernelConfig, list[KernelConfig]],
    moves: dict[KernelConfig, tuple[int, ...]],
    categorical: frozenset[str] = frozenset(),
    *,
    fresh_axes_first: bool = False,
    prior: Mapping[KernelConfig, float] | None = None,
) -> KernelConfig | None:
    """The next unmeasured neighbour (in `neighbourhood_order`) of the fastest ok config that
    still has one, or None when no ok config has any. Takes it off its centre's queue in
    `queues` (built on first use) and records the move that reached it in `moves`.
    `categorical`: as for `neighbours`. With `fresh_axes_first`, a centre's pattern move is
    still first, but then its first queued one-axis neighbour along an axis that no measured
    config's move in `moves` has changed (`fresh_axes`) comes before the rest of the queue.
    `prior`: as for `neighbourhood_order`."""
    fresh = fresh_axes(tracker, moves, len(axes)) if fresh_axes_first else set()
    for _, _, centre in sorted(
        (result.latency_us, index, config)
        for index, (config, result) in enumerate(tracker.history)
        if result.ok
    ):
        queue = queues.get(centre)
        if queue is None:
            queue = queues[centre] = neighbourhood_order(
                centre, axes, tracker, rng, moves, categorical, prior
            )
        while queue and queue[0] in tracker.results:
            queue.pop(0)
        if queue:
            pick = 0
            if fresh and (centre not in moves or queue[0] != _apply(centre, moves[centre], axes)):
                pick = next(
                    (
                        i
                        for i, c in enumerate(queue)
                        if c not in tracker.results
                        and len(moved := _moved_axes(move_of(centre, c, axes))) == 1
                        and moved <= fresh
                    ),
                    0,
                )
            candidate = queue.pop(pick)
            moves.setdefault(candidate, move_of(centre, candidate, axes))
            return candidate
    return None


def fresh_axes(
    tracker: BudgetedEvaluate, moves: dict[KernelConfig, tuple[int, ...]], count: int
) -> set[int]:
    """Indices (of `count` axes) that no move in `moves` of a config measured in `tracker`
    changed: the axes the search has not yet stepped along in this task."""
    moved: set[int] = set()
    for config, move in moves.items():
        if config in tracker.results:
            moved |= _moved_axes(move)
    return set(range(count)) - moved


def _moved_axes(move: tuple[int, ...]) -> set[int]:
    return {axis for axis, step in enumerate(move) if step}


def neighbourhood_order(
    centre: KernelConfig,
    axes: Sequence[Axis],
    tracker: BudgetedEvaluate,
    rng: random.Random,
    moves: dict[KernelConfig, tuple[int, ...]],
    categorical: frozenset[str] = frozenset(),
    prior: Mapping[KernelConfig, float] | None = None,
) -> list[KernelConfig]:
    """The order in which a centre's neighbours of the space are tried: the pattern move that
    reached it first (if any), then its one-step neighbours, then its diagonal ones, each
    group in a seeded random order, or, with a `prior` (lower is faster, e.g.
    `prior.fit_prior`), fastest predicted first (ties in the seeded order). `categorical`: as
    for `neighbours`."""
    singles = [c for c in neighbours(centre, axes, categorical=categorical) if c in tracker.allowed]
    diagonals = [
        c
        for c in neighbours(centre, axes, pairs=True, categorical=categorical)
        if c in tracker.allowed and c not in singles
    ]
    rng.shuffle(singles)
    rng.shuffle(diagonals)
    if prior is not None:  # after the shuffles, so the seeded draws stay those without one
        singles.sort(key=lambda c: prior.get(c, 0.0))
        diagonals.sort(key=lambda c: prior.get(c, 0.0))
    ahead = _apply(centre, moves[centre], axes) if centre in moves else None
    first = [ahead] if ahead is not None and ahead in tracker.allowed else []
    return first + [c for c in singles + diagonals if c != ahead]


def move_of(centre: KernelConfig, config: KernelConfig, axes: Sequence[Axis]) -> tuple[int, ...]:
    """Index steps along each axis from centre to config (a pattern move)."""
    return tuple(
        axis.values.index(getattr(config, axis.key)) - axis.values.index(getattr(centre, axis.key))
        for axis in axes
    )


def _apply(
    config: KernelConfig, move: tuple[int, ...], axes: Sequence[Axis]
) -> KernelConfig | None:
    """The config one move further on, or None past the end of an axis."""
    values = config.as_dict()
    for axis, step in zip(axes, move, strict=True):
        index = axis.values.index(values[axis.key]) + step
        if not 0 <= index < len(axis.values):
            return None
        values[axis.key] = axis.values[index]
    return KernelConfig(**values)


class LocalStrategy(Strategy):
    """Best-first neighbourhood search (hill climbing that widens when it is stuck)."""

    name = "local"

    def search(
        self,
        evaluate: Evaluate,
        *,
        space: Sequence[KernelConfig],
        budget: int,
        seed: int,
        warm_start: Sequence[KernelConfig] = (),
    ) -> History:
        """Measure `warm_start` in order, then climb from the best of them."""
        tracker = BudgetedEvaluate(evaluate, space, budget)
        tracker.warm_start(warm_start)
        run_local(tracker, space_axes(space), seed=seed, stop_at=tracker.budget)
        return tracker.history
