"""Iterated local search ("ils"): best-first neighbourhood search that leaves a steep local
optimum by kicks, started from every block tile; pruned configs cost no budget."""

from __future__ import annotations

import random
from collections.abc import Sequence

from tuner.kernels.config import KernelConfig
from tuner.search.axes import Axis, neighbours, space_axes
from tuner.search.base import Evaluate, History, Strategy
from tuner.search.budget import PRUNED, BudgetedEvaluate
from tuner.search.local import best_first_step

# Counted trials in a row without a faster config, none of them within FLAT of the incumbent,
# before a kick. Tried: 8, 12, 16, 24 (bench/README.md).
PATIENCE = 16
# A trial within this fraction of the incumbent's latency means a flat neighbourhood (a plateau
# worth walking, as best-first does); a steep one (every neighbour far slower: a needle or a
# local optimum) is left by a kick. Tried: none, 0.03, 0.05.
FLAT = 0.05
# A kick measures this many runnable configs 2-3 axes away from the incumbent (axes and values
# drawn at random), then climbs from the fastest of them.
KICKS = 3
KICK_AXES = (2, 3)
# Draws per kick before giving up (most draws of a small space are measured already).
KICK_DRAWS = 400
# Block tiles (BLOCK_SIZE_M x BLOCK_SIZE_N elements) that `tile_batch` may also try with more
# warps: 128x128 and up.
LARGE_TILE = 128 * 128


def kicked(config: KernelConfig, axes: Sequence[Axis], rng: random.Random) -> KernelConfig:
    """The config with 2 or 3 random axes set to another of their values (maybe off-space)."""
    values = config.as_dict()
    for axis in rng.sample(list(axes), rng.choice(KICK_AXES)):
        values[axis.key] = rng.choice([v for v in axis.values if v != values[axis.key]])
    return KernelConfig(**values)


def climb(
    tracker: BudgetedEvaluate, axes: Sequence[Axis], rng: random.Random, start: KernelConfig
) -> KernelConfig:
    """First-improvement hill climb over one-step neighbours, in a seeded order, from an ok
    config; stops at a config none of whose one-step neighbours is faster, or when the budget
    is spent. Returns where it stopped."""
    current = start
    while tracker.left > 0:
        candidates = [c for c in neighbours(current, axes) if c in tracker.allowed]
        rng.shuffle(candidates)
        for config in candidates:
            if tracker.left <= 0:
                return current
            result = tracker(config)
            if (
                result is not None
                and result.ok
                and result.ok_latency_us < tracker.results[current].ok_latency_us
            ):
                current = config
                break
        else:
            return current
    return current


def tile_batch(
    base: KernelConfig,
    axes: Sequence[Axis],
    rng: random.Random,
    large_tile_warps: int | None = None,
) -> list[KernelConfig]:
    """`base` with every (BLOCK_SIZE_M, BLOCK_SIZE_N) of the axes, in a seeded order: one
    start per block tile, the axes a GEMM's time depends on most.

    With `large_tile_warps` (e.g. 8), every tile of at least LARGE_TILE elements is also tried
    with that many warps: a 128x128 tile on 4 warps holds 128 accumulators per thread, so it
    would start its basin far from its best."""
    by_key = {axis.key: axis for axis in axes}
    batch = [
        KernelConfig(**{**base.as_dict(), "BLOCK_SIZE_M": m, "BLOCK_SIZE_N": n})
        for m in by_key["BLOCK_SIZE_M"].values
        for n in by_key["BLOCK_SIZE_N"].values
    ]
    if large_tile_warps is not None:
        batch += [
            KernelConfig(**{**c.as_dict(), "num_warps": large_tile_warps})
            for c in batch
            if c.BLOCK_SIZE_M * c.BLOCK_SIZE_N >= LARGE_TILE and c.num_warps != large_tile_warps
        ]
    rng.shuffle(batch)
    return batch


def run_ils(tracker: BudgetedEvaluate, axes: Sequence[Axis], *, seed: int) -> None:
    """Search until the budget is spent (or the space is): best-first steps as `run_local`
    (the next unmeasured neighbour of the fastest config that has one), and after PATIENCE
    counted steps that neither found a faster config nor came within FLAT of the incumbent, a
    kick (KICKS runnable configs a few axes away) and a climb from the fastest of them. Ties
    between near-equal configs are left to the re-timing's noise rule (tuner.measure.noise),
    as for every strategy.

    Args:
        tracker: the shared, budgeted evaluate (warm starts measured in it).
        axes: the axes of the space.
        seed: seed of every random choice.
    """
    rng = random.Random(seed)
    ordered_space = sorted(tracker.allowed)
    queues: dict[KernelConfig, list[KernelConfig]] = {}
    moves: dict[KernelConfig, tuple[int, ...]] = {}
    incumbent = tracker.incumbent()
    stall = 0
    while tracker.left > 0 and len(tracker.results) < len(tracker.allowed):
        if stall >= PATIENCE and incumbent is not None:
            stall = 0
            _kick(tracker, axes, rng, incumbent[0])
        else:
            candidate = best_first_step(tracker, axes, rng, queues, moves)
            if candidate is None:
                candidate = rng.choice([c for c in ordered_space if c not in tracker.results])
            left = tracker.left
            result = tracker(candidate)
            flat = (
                result is not None
                and result.ok
                and incumbent is not None
                and result.ok_latency_us <= incumbent[1] * (1 + FLAT)
            )
            stall += tracker.left < left and not flat
        now = tracker.incumbent()
        if now is not None and (incumbent is None or now[1] < incumbent[1]):
            incumbent, stall = now, 0


def _kick(
    tracker: BudgetedEvaluate, axes: Sequence[Axis], rng: random.Random, incumbent: KernelConfig
) -> None:
    found: list[tuple[float, KernelConfig]] = []
    for _ in range(KICK_DRAWS):
        if tracker.left <= 0 or len(found) >= KICKS:
            break
        config = kicked(incumbent, axes, rng)
        if config in tracker.allowed and config not in tracker.results:
            result = tracker(config)
            if result is not None and result.ok:
                found.append((result.ok_latency_us, config))
    if found:
        climb(tracker, axes, rng, min(found)[1])


class IteratedLocalStrategy(Strategy):
    """Iterated local search: warm starts, then vLLM's default (the first warm start) with
    every block tile, then best-first neighbourhood search with kicks out of steep local
    optima (`run_ils`). Configs pruned before launch (invalid, compile_error, out_of_resources:
    `budget.PRUNED`) cost no budget, so a task may store more than `budget` trials, of which
    at most `budget` were measured."""

    name = "ils"
    free = PRUNED

    def search(
        self,
        evaluate: Evaluate,
        *,
        space: Sequence[KernelConfig],
        budget: int,
        seed: int,
        warm_start: Sequence[KernelConfig] = (),
    ) -> History:
        """Measure `warm_start` in order, the tile batch, then `run_ils` to `budget` counted
        trials (see the class)."""
        tracker = BudgetedEvaluate(evaluate, space, budget, free=self.free)
        axes = space_axes(space)
        start_from_tiles(tracker, axes, warm_start, seed=seed)
        run_ils(tracker, axes, seed=seed)
        return tracker.history

    def planned(
        self, *, space: Sequence[KernelConfig], seed: int, warm_start: Sequence[KernelConfig] = ()
    ) -> list[KernelConfig]:
        """The configs `search` measures first whatever their results (`base.planned`)."""
        return planned_start(space, warm_start, seed=seed)


def start_from_tiles(
    tracker: BudgetedEvaluate,
    axes: Sequence[Axis],
    warm_start: Sequence[KernelConfig],
    *,
    seed: int,
) -> None:
    """Measure `warm_start` in order, then the tile batch of the first warm start of the space
    (of the space's first config without one), within the budget.

    Args:
        tracker: the task's budgeted evaluate, nothing measured yet.
        axes: the axes of the space.
        warm_start: vLLM's default first, then winners of other tasks.
        seed: seed of the batch's order.
    """
    tracker.warm_start(warm_start)
    for config in first_batch(tracker.allowed, axes, warm_start, seed=seed):
        if tracker.left <= 0:
            break
        tracker(config)


def first_batch(
    allowed: frozenset[KernelConfig],
    axes: Sequence[Axis],
    warm_start: Sequence[KernelConfig],
    *,
    seed: int,
    large_tile_warps: int | None = None,
) -> list[KernelConfig]:
    """`tile_batch` of the first warm start in `allowed` (of the first config of `allowed`
    without one), seeded by `seed`."""
    starts = [c for c in warm_start if c in allowed] or [min(allowed)]
    return tile_batch(starts[0], axes, random.Random(seed), large_tile_warps)


def planned_start(
    space: Sequence[KernelConfig], warm_start: Sequence[KernelConfig], *, seed: int
) -> list[KernelConfig]:
    """What `start_from_tiles` measures, in order, whatever the results: the warm starts and
    the tile batch, each config of the space once (configs pruned for free let it measure more
    within a budget, never others).

    Args:
        space: the task's candidates.
        warm_start, seed: as given to `start_from_tiles`.
    """
    allowed = frozenset(space)
    batch = first_batch(allowed, space_axes(space), warm_start, seed=seed)
    return [c for c in dict.fromkeys([*warm_start, *batch]) if c in allowed]
