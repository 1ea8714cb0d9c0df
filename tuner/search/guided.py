"""Model-guided search ("guided"), the default: best-first steps from the warm starts (a step
that cannot launch is repaired by a second one; a centre's neighbours in the order a prior
fitted on the related tasks' trials predicts fastest, when the store has some), with every
block tile tried in turn between them at the settings tuned so far; when the steps stall, the
rest of the tiles, then the runner-up tiles with the settings tuned by then; after that,
whenever they stall, the configs a ridge regression on every trial so far predicts fastest.

The constants were chosen on replayed landscapes (bench/README.md, *Search design choices*).
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import replace
from itertools import combinations

import numpy as np
from threadpoolctl import threadpool_limits

from tuner.kernels.config import KernelConfig
from tuner.measure.trial import TrialResult
from tuner.search.axes import Axis, neighbours, space_axes
from tuner.search.base import PRUNED, BudgetedEvaluate, Evaluate, History, Strategy, TaskTimings

# Ridge penalty on the feature weights (0/1 features, target log(latency_us)), the guide's and
# the prior's. Tried 0.3, 1, 3.
RIDGE = 1.0
# Fewest ok trials before the guide proposes anything, or before a prior is fitted.
MIN_FIT = 8
# Counted steps in a row (since the last faster config) that neither found a faster config nor
# came within FLAT of the incumbent before the tiles left, the transfers and the guide take over
# (until a faster config is found). Tried 3-8.
GUIDE_AFTER = 8
FLAT = 0.05
# The guide's local proposals come from the neighbours of this many fastest configs. Tried 3,
# 5, 8.
LOCAL_TOP = 5
# GROUP_SIZE_M's values (1, 16, 32, 64: L2 swizzle widths) are not evenly spaced, so a step
# along it may go to any other value.
CATEGORICAL = frozenset({"GROUP_SIZE_M"})
# Tiles of at least 128x128 are tried with 4 and with 8 warps in the tile batch: on 4 warps a
# 128x128 tile holds 128 accumulators per thread, far from its best.
LARGE_TILE, LARGE_TILE_WARPS = 128 * 128, 8
# The next tile of the batch is tried after this many turns that were not tiles. Tried 1-4 and
# the whole batch first.
SPREAD = 3
# At the first stall, this many of the fastest tiles of the batch (other than the incumbent's)
# are tried again with the incumbent's BLOCK_SIZE_K, GROUP_SIZE_M and num_stages: a tile was
# measured with the settings known when its turn came, which can hide its best. Tried 2-6.
TRANSFER_TILES = 3
# A best-first step goes first along an axis no step has moved along yet in the task (after
# the pattern move): num_stages is worth 2x at small M on the synthetic sm90 landscape.
FRESH_AXES_FIRST = True

Move = tuple[int, ...]  # index steps along each axis, from a centre to a config


class GuidedStrategy(Strategy):
    """Warm starts, then `_Search`. Configs pruned before launch (`PRUNED`) cost no budget, so
    a task may store more than `budget` trials, of which at most `budget` were measured. What
    it measures after the warm starts depends on their results, so only they are `planned`.
    No choice depends on the budget, so a larger budget begins with the trials of a smaller
    one (what `tuner sweep` relies on to extend a sweep)."""

    name = "guided"
    free = PRUNED
    reads_related = True

    def search(
        self,
        evaluate: Evaluate,
        *,
        space: Sequence[KernelConfig],
        budget: int,
        seed: int,
        warm_start: Sequence[KernelConfig] = (),
        related: Sequence[TaskTimings] = (),
    ) -> History:
        """Measure `warm_start` in order, then search to `budget` counted trials, each centre's
        neighbours ordered by `fit_prior` of `related` (the ok trials of the device's related
        tasks) when there are enough of them."""
        tracker = BudgetedEvaluate(evaluate, space, budget, free=self.free)
        tracker.warm_start(warm_start)
        # The fits are small (a few hundred rows): a multi-threaded BLAS only spins its threads.
        with threadpool_limits(limits=1, user_api="blas"):
            _Search(tracker, space_axes(space), seed, warm_start, related).run()
        return tracker.history


def tile_batch(start: KernelConfig, axes: Sequence[Axis], rng: random.Random) -> list[KernelConfig]:
    """`start` with every (BLOCK_SIZE_M, BLOCK_SIZE_N) of the axes, the large tiles also with
    LARGE_TILE_WARPS warps, in a seeded order: the axes a GEMM's time depends on most."""
    sizes = {axis.key: axis.values for axis in axes}
    batch = [
        replace(start, BLOCK_SIZE_M=m, BLOCK_SIZE_N=n)
        for m in sizes["BLOCK_SIZE_M"]
        for n in sizes["BLOCK_SIZE_N"]
    ]
    batch += [
        replace(c, num_warps=LARGE_TILE_WARPS)
        for c in batch
        if c.BLOCK_SIZE_M * c.BLOCK_SIZE_N >= LARGE_TILE and c.num_warps != LARGE_TILE_WARPS
    ]
    rng.shuffle(batch)
    return batch


def with_tile(settings: KernelConfig, tile: KernelConfig) -> KernelConfig:
    """`settings` with the block tile (BLOCK_SIZE_M, BLOCK_SIZE_N) and num_warps of `tile`."""
    m, n, warps = tile.BLOCK_SIZE_M, tile.BLOCK_SIZE_N, tile.num_warps
    return replace(settings, BLOCK_SIZE_M=m, BLOCK_SIZE_N=n, num_warps=warps)


@functools.lru_cache(maxsize=4)
def encoded(space: tuple[KernelConfig, ...], axes: tuple[Axis, ...]) -> np.ndarray:
    """The features of a space, kept for the next task (a sweep searches the same space for
    every task): one 0/1 float64 row per config, one column per (axis, value) and one per pair
    of values of two different axes (e.g. BLOCK_SIZE_N=128 with num_warps=8): 21 + 180 = 201
    for vLLM's grid."""
    index = np.array(
        [[axis.values.index(getattr(config, axis.key)) for axis in axes] for config in space]
    ).reshape(len(space), len(axes))
    columns = [index[:, a] == v for a, axis in enumerate(axes) for v in range(len(axis.values))]
    for a, b in combinations(range(len(axes)), 2):
        columns += [
            (index[:, a] == va) & (index[:, b] == vb)
            for va in range(len(axes[a].values))
            for vb in range(len(axes[b].values))
        ]
    return np.stack(columns, axis=1).astype(np.float64)


def fit_prior(
    configs: Sequence[KernelConfig], x: np.ndarray, tasks: Sequence[TaskTimings]
) -> dict[KernelConfig, float] | None:
    """Predicted log(latency_us), relative across configs (lower is faster), of every config
    of a space (`x`: its `encoded` features): a ridge regression on the related tasks' ok
    trials, each task's log(latency_us) centred on its own mean (tasks differ in scale, not in
    which config is faster). Configs outside `configs` are skipped, a config timed twice in a
    task counts once at its fastest; None with fewer than MIN_FIT usable trials."""
    row = {config: i for i, config in enumerate(configs)}
    rows: list[int] = []
    y: list[float] = []
    for timings in tasks:
        fastest: dict[int, float] = {}
        for config, latency_us in timings:
            i = row.get(config)
            if i is not None and latency_us > 0:
                fastest[i] = min(fastest.get(i, math.inf), latency_us)
        if len(fastest) >= 2:
            logs = np.log(list(fastest.values()))
            rows += fastest
            y += list(logs - logs.mean())
    if len(rows) < MIN_FIT:
        return None
    a = x[rows]
    weights = np.linalg.solve(a.T @ a + RIDGE * np.eye(a.shape[1]), a.T @ np.array(y))
    return dict(zip(configs, (x @ weights).tolist(), strict=True))


class RidgeGuide:
    """Proposes configs from a ridge regression of log(latency_us) on the `encoded` features
    of every ok trial so far: alternately the unmeasured config of the whole space predicted
    fastest (it finds a distant optimum the trials point at) and the one predicted fastest
    among the unmeasured neighbours of the LOCAL_TOP fastest configs (it polishes where the
    measurements are). Ties go to the config first in `configs`."""

    def __init__(self, configs: Sequence[KernelConfig], axes: Sequence[Axis]) -> None:
        self.configs = list(configs)
        self.row = {config: i for i, config in enumerate(self.configs)}
        self.axes = axes
        self.x = encoded(tuple(self.configs), tuple(axes))
        self.calls = 0

    def __call__(self, tracker: BudgetedEvaluate) -> KernelConfig | None:
        """The next proposal, or None: fewer than MIN_FIT ok trials, or nothing left."""
        measured = np.zeros(len(self.configs), dtype=bool)
        ok_rows: list[int] = []
        ok_y: list[float] = []
        for config, result in tracker.history:
            measured[self.row[config]] = True
            if result.ok:
                ok_rows.append(self.row[config])
                ok_y.append(float(np.log(result.ok_latency_us)))
        if len(ok_rows) < MIN_FIT:
            return None
        self.calls += 1
        y = np.array(ok_y)
        x = self.x[ok_rows]
        # Dual form, as there are fewer trials than features: w = X^T (X X^T + ridge I)^-1 y,
        # with y centred (the mean is the unpenalised intercept).
        alpha = np.linalg.solve(x @ x.T + RIDGE * np.eye(len(y)), y - y.mean())
        predicted = self.x @ (x.T @ alpha) + y.mean()
        candidates = ~measured
        if self.calls % 2 == 0:
            top = [self.configs[ok_rows[i]] for i in np.argsort(y, kind="stable")[:LOCAL_TOP]]
            near = {
                n
                for c in top
                for n in neighbours(c, self.axes, pairs=True, categorical=CATEGORICAL)
            }
            local = candidates & np.array([config in near for config in self.configs])
            if local.any():
                candidates = local
        if not candidates.any():
            return None
        return self.configs[int(np.argmin(np.where(candidates, predicted, np.inf)))]


def repaired(
    tracker: BudgetedEvaluate, blocked: KernelConfig, axes: Sequence[Axis], rng: random.Random
) -> list[KernelConfig]:
    """The repairs of a best-first step that cannot launch (`PRUNED`): its unmeasured
    neighbours of the space, in a seeded order. Each is the blocked move with one more step,
    most often along another axis (a larger tile with one stage fewer, a BLOCK_SIZE_K the
    constraints allow only with another GROUP_SIZE_M), which best-first would reach only after
    every other neighbour of its centre, and a model predicts from the value that failed."""
    found = [
        c
        for c in neighbours(blocked, axes, categorical=CATEGORICAL)
        if c in tracker.allowed and c not in tracker.results
    ]
    rng.shuffle(found)
    return found


def _pop_new(pending: list[KernelConfig], done: Mapping) -> KernelConfig | None:
    """Take the first config of `pending` not in `done` off it (and those before it)."""
    while pending and pending[0] in done:
        pending.pop(0)
    return pending.pop(0) if pending else None


def move_of(centre: KernelConfig, config: KernelConfig, axes: Sequence[Axis]) -> Move:
    """Index steps along each axis from centre to config."""
    return tuple(
        axis.values.index(getattr(config, axis.key)) - axis.values.index(getattr(centre, axis.key))
        for axis in axes
    )


def moved_axes(move: Move) -> set[int]:
    return {axis for axis, step in enumerate(move) if step}


def apply(config: KernelConfig, move: Move, axes: Sequence[Axis]) -> KernelConfig | None:
    """The config one move further on, or None past the end of an axis."""
    values = config.as_dict()
    for axis, step in zip(axes, move, strict=True):
        index = axis.values.index(values[axis.key]) + step
        if not 0 <= index < len(axis.values):
            return None
        values[axis.key] = axis.values[index]
    return KernelConfig(**values)


class _Search:
    """One guided search after the warm starts. Each turn proposes a config (a tile, a
    transfer or the guide's pick, `proposal`) or else takes a step (a repair, a best-first
    step or a random config, `step`), then keeps the books (`record`).

    Attributes:
        rng: orders the neighbours and draws the random configs; repair_rng orders the
            repairs (its own, so that the steps' order does not depend on them).
        queues: each centre's unmeasured neighbours, in the order they are tried.
        moves: the move that first reached a config (from its centre, or carried over).
        incumbent: the fastest ok config so far and its latency_us, or None.
        tiles: the tile batch still to try; tried: the configs tried for it, in order.
        stall: counted steps since the last faster config that came no closer than FLAT.
        since_tile: turns since the last tile.
        transfers: the runner-up tiles with the tuned settings (`retiled`), from the first
            stall on.
        repairs: the `repaired` configs of pruned steps still to try.
        carried: the last move of a step that found a faster config.
    """

    def __init__(
        self,
        tracker: BudgetedEvaluate,
        axes: Sequence[Axis],
        seed: int,
        warm_start: Sequence[KernelConfig],
        related: Sequence[TaskTimings],
    ) -> None:
        self.tracker, self.axes = tracker, axes
        # KernelConfig's own order (its fields in turn), without a dataclass comparison each.
        configs = sorted(tracker.allowed, key=lambda c: tuple(c.as_dict().values()))
        self.guide = RidgeGuide(configs, axes)
        self.prior = fit_prior(configs, self.guide.x, related) if related else None
        self.rng, self.repair_rng = random.Random(seed), random.Random(f"repair {seed}")
        starts = [c for c in warm_start if c in tracker.allowed] or [min(tracker.allowed)]
        tiles = tile_batch(starts[0], axes, random.Random(seed))
        self.tiles = [c for c in tiles if c in tracker.allowed]
        self.tried: list[KernelConfig] = []
        self.queues: dict[KernelConfig, list[KernelConfig]] = {}
        self.moves: dict[KernelConfig, Move] = {}
        ok = [(c, r.ok_latency_us) for c, r in tracker.history if r.ok]  # the warm starts
        self.incumbent = min(ok, key=lambda item: item[1], default=None)
        self.stall = self.since_tile = 0
        self.transfers: list[KernelConfig] | None = None
        self.repairs: list[KernelConfig] = []
        self.carried: Move | None = None

    def run(self) -> None:
        tracker = self.tracker
        while tracker.left > 0 and len(tracker.results) < len(tracker.allowed):
            candidate = self.proposal()
            if candidate is not None:
                self.record(candidate, tracker(candidate), step=False)
            else:
                self.step()

    def proposal(self) -> KernelConfig | None:
        """The next tile when one is due (every SPREAD turns, or each turn once stalled);
        else, once stalled, the next transfer or the guide's pick; else None."""
        stalled = self.stall >= GUIDE_AFTER
        tile = self.next_tile() if self.since_tile >= SPREAD or stalled else None
        if tile is not None:
            self.since_tile = 0
            return tile
        self.since_tile += 1
        if not stalled:
            return None
        if self.transfers is None and self.incumbent is not None:
            self.transfers = self.retiled(self.incumbent[0])
        return self.transfers.pop(0) if self.transfers else self.guide(self.tracker)

    def next_tile(self) -> KernelConfig | None:
        """The next tile of the batch not measured yet, with the incumbent's BLOCK_SIZE_K,
        GROUP_SIZE_M and num_stages when that config is in the space and new."""
        tracker = self.tracker
        config = _pop_new(self.tiles, tracker.results)
        if config is None:
            return None
        if self.incumbent is not None:
            tuned = with_tile(self.incumbent[0], config)
            if tuned in tracker.allowed and tuned not in tracker.results:
                config = tuned
        self.tried.append(config)
        return config

    def retiled(self, incumbent: KernelConfig) -> list[KernelConfig]:
        """Up to TRANSFER_TILES unmeasured configs: the incumbent with the tile and num_warps
        of each of the fastest ok configs tried for the batch, fastest first, skipping the
        incumbent's own tile."""
        results, own = self.tracker.results, (incumbent.BLOCK_SIZE_M, incumbent.BLOCK_SIZE_N)
        ranked = sorted(
            (results[c].latency_us, i) for i, c in enumerate(self.tried) if results[c].ok
        )
        found = [
            with_tile(incumbent, self.tried[i])
            for _, i in ranked
            if (self.tried[i].BLOCK_SIZE_M, self.tried[i].BLOCK_SIZE_N) != own
        ]
        found = [c for c in found if c in self.tracker.allowed and c not in results]
        return found[:TRANSFER_TILES]

    def step(self) -> None:
        """Measure a repair, else a best-first step, else a random unmeasured config: the
        only kinds that count towards a stall. A pruned best-first step queues its repairs."""
        tracker = self.tracker
        candidate = _pop_new(self.repairs, tracker.results)
        step = False
        if candidate is None:
            candidate = self.best_first()
            step = candidate is not None
        if candidate is None:
            candidate = self.rng.choice([c for c in self.guide.configs if c not in tracker.results])
        left = tracker.left
        result = tracker(candidate)
        flat = (
            result is not None
            and result.ok
            and self.incumbent is not None
            and result.ok_latency_us <= self.incumbent[1] * (1 + FLAT)
        )
        self.stall += tracker.left < left and not flat
        if step and result is not None and result.status in PRUNED:
            self.repairs[:0] = repaired(tracker, candidate, self.axes, self.repair_rng)
        self.record(candidate, result, step=step)

    def record(self, candidate: KernelConfig, result: TrialResult | None, *, step: bool) -> None:
        """Carry the last paying move over to a config that did not come by a step (its first
        step, once it is the fastest, is that pattern move), and take a faster config as the
        incumbent (which ends a stall)."""
        if not step and self.carried is not None:
            self.moves.setdefault(candidate, self.carried)
        if (
            result is not None
            and result.ok
            and (self.incumbent is None or result.ok_latency_us < self.incumbent[1])
        ):
            self.incumbent, self.stall = (candidate, result.ok_latency_us), 0
            if step:
                self.carried = self.moves[candidate]

    def best_first(self) -> KernelConfig | None:
        """The next unmeasured neighbour of the fastest ok config that still has one, or None.
        With FRESH_AXES_FIRST, a centre's pattern move is still first, but then its first
        one-axis neighbour along an axis that no measured config's move has changed."""
        tracker, axes, moves = self.tracker, self.axes, self.moves
        moved = set().union(*(moved_axes(m) for c, m in moves.items() if c in tracker.results))
        fresh = [{a} for a in range(len(axes)) if a not in moved] if FRESH_AXES_FIRST else []
        ok = sorted((r.latency_us, i, c) for i, (c, r) in enumerate(tracker.history) if r.ok)
        for _, _, centre in ok:
            if centre not in self.queues:
                self.queues[centre] = self.neighbourhood(centre)
            queue = [c for c in self.queues[centre] if c not in tracker.results]
            self.queues[centre] = queue
            if not queue:
                continue
            pick = 0
            if fresh and (centre not in moves or queue[0] != apply(centre, moves[centre], axes)):
                along = (
                    i for i, c in enumerate(queue) if moved_axes(move_of(centre, c, axes)) in fresh
                )
                pick = next(along, 0)
            candidate = queue.pop(pick)
            moves.setdefault(candidate, move_of(centre, candidate, axes))
            return candidate
        return None

    def neighbourhood(self, centre: KernelConfig) -> list[KernelConfig]:
        """The order in which a centre's neighbours of the space are tried: the pattern move
        that reached it first (if any), then its one-step neighbours, then its diagonal ones,
        each group in a seeded order, or, with a prior, fastest predicted first."""
        allowed, axes = self.tracker.allowed, self.axes
        singles = [c for c in neighbours(centre, axes, categorical=CATEGORICAL) if c in allowed]
        diagonals = [
            c
            for c in neighbours(centre, axes, pairs=True, categorical=CATEGORICAL)
            if c in allowed and c not in singles
        ]
        self.rng.shuffle(singles)
        self.rng.shuffle(diagonals)
        if self.prior is not None:  # after the shuffles, so the seeded draws stay those without
            prior = self.prior
            singles.sort(key=lambda c: prior.get(c, 0.0))
            diagonals.sort(key=lambda c: prior.get(c, 0.0))
        ahead = apply(centre, self.moves[centre], axes) if centre in self.moves else None
        first = [ahead] if ahead is not None and ahead in allowed else []
        return first + [c for c in singles + diagonals if c != ahead]
