"""Model-guided search ("guided"): best-first steps (a step that cannot launch is repaired by
a second one; a centre's neighbours in the order a prior fitted on the related tasks' trials
predicts fastest, when the store has some), with every block tile tried in turn between them
at the settings tuned so far;
when the steps stall, the rest of the tiles, then the runner-up tiles with the settings tuned by
then; after that, whenever they stall, the configs a ridge regression on every trial so far
predicts fastest."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tuner.kernels.config import KernelConfig
from tuner.measure.trial import TrialResult
from tuner.search.axes import Axis, neighbours, space_axes
from tuner.search.base import Evaluate, History, Strategy, TaskTimings
from tuner.search.budget import PRUNED, BudgetedEvaluate
from tuner.search.features import encoded
from tuner.search.ils import FLAT, first_batch
from tuner.search.local import best_first_step
from tuner.search.prior import fit_prior
from tuner.search.tiles import TileBatch, retiled

if TYPE_CHECKING:  # numpy is imported where it is used: `tuner.search` is on the CLI's
    import numpy as np  # start-up path, which should not pay 50 ms for it

# Ridge penalty on the feature weights (0/1 features, target log(latency_us)), the guide's and
# the prior's. Tried 0.3, 1, 3 (bench/README.md).
RIDGE = 1.0
# Fewest ok trials before the model proposes anything.
MIN_FIT = 8
# Counted best-first steps (since the last faster config) that neither found a faster config
# nor came within FLAT of the incumbent before the tiles left, the transfers and the model take
# over (until a faster config is found). Tried 0-8; 4 until repairs and carried moves came,
# then 8 (3-8 tried again, bench/README.md).
GUIDE_AFTER = 8
# The model's local proposals come from the neighbours of this many fastest configs. Tried 3,
# 5, 8.
LOCAL_TOP = 5
# GROUP_SIZE_M's values (1, 16, 32, 64: L2 swizzle widths) are not evenly spaced, so a step
# along it may go to any other value.
CATEGORICAL = frozenset({"GROUP_SIZE_M"})
# Tiles of 128x128 and up are tried with 4 and with 8 warps in the tile batch.
LARGE_TILE_WARPS = 8
# The next tile of the batch is tried after this many steps (best-first or the model's) that
# were not tiles. Tried 1, 2, 3, 4 and the whole batch first (bench/README.md).
SPREAD = 3
# At the first stall, this many of the fastest tiles of the tile batch (other than the
# incumbent's) are tried again with the incumbent's BLOCK_SIZE_K, GROUP_SIZE_M and num_stages.
# Tried 2, 3, 4, 6 (bench/README.md).
TRANSFER_TILES = 3
# A best-first step goes first along an axis no step has moved along yet in the task (after
# the pattern move): num_stages is worth 2x at small M on the synthetic sm90 landscape, where 10
# of 300 tasks at 16 trials stayed at vLLM's 2 stages, below 0.5 of the optimum (bench/README.md).
FRESH_AXES_FIRST = True


class RidgeGuide:
    """Proposes configs from a ridge regression of log(latency_us) on `features`, refitted to
    every ok trial at each call: alternately the unmeasured config of the whole space predicted
    fastest (global: it finds a distant optimum the trials point at) and the one predicted
    fastest among the unmeasured neighbours (diagonal ones too) of the LOCAL_TOP fastest configs
    (local: it polishes where the measurements are). Ties go to the config first in `space`."""

    def __init__(
        self,
        space: Sequence[KernelConfig],
        axes: Sequence[Axis],
        *,
        ridge: float = RIDGE,
        local_top: int = LOCAL_TOP,
        categorical: frozenset[str] = CATEGORICAL,
    ) -> None:
        """Args: space: the configs it may propose; axes: from `space_axes`; ridge, local_top,
        categorical: see RIDGE, LOCAL_TOP, CATEGORICAL."""
        import numpy as np

        self.configs = list(space)
        self.row = {config: i for i, config in enumerate(self.configs)}
        self.x, self.adjacent = encoded(tuple(self.configs), tuple(axes), categorical)
        self.ridge = ridge
        self.local_top = local_top
        self.calls = 0
        # Trials seen so far (a prefix of the tracker's history): measured rows, and the rows
        # and log(latency_us) of the ok ones, in history order.
        self.seen = 0
        self.measured = np.zeros(len(self.configs), dtype=bool)
        self.ok_rows: list[int] = []
        self.ok_y: list[float] = []
        self.gram = np.empty((0, 0))  # X X^T of the ok rows

    def _update(self, tracker: BudgetedEvaluate) -> None:
        import numpy as np

        for config, result in tracker.history[self.seen :]:
            row = self.row.get(config)
            if row is not None:
                self.measured[row] = True
                if result.ok:
                    self.ok_rows.append(row)
                    self.ok_y.append(float(np.log(result.ok_latency_us)))
        self.seen = len(tracker.history)

    def predict(self, tracker: BudgetedEvaluate) -> np.ndarray | None:
        """Predicted log(latency_us) of every config of the space (in `configs` order), or None
        with fewer than MIN_FIT ok trials in `tracker`."""
        import numpy as np

        self._update(tracker)
        if len(self.ok_rows) < MIN_FIT:
            return None
        y = np.array(self.ok_y)
        x = self.x[self.ok_rows]
        n = len(self.gram)
        if n < len(y):  # extend X X^T by the new trials' rows and columns
            gram = np.empty((len(y), len(y)))
            gram[:n, :n] = self.gram
            gram[n:, :] = x[n:] @ x.T
            gram[:n, n:] = gram[n:, :n].T
            self.gram = gram
        # Dual form, as there are fewer trials than features: w = X^T (X X^T + ridge I)^-1 y,
        # with y centred (the mean is the unpenalised intercept).
        alpha = np.linalg.solve(self.gram + self.ridge * np.eye(len(y)), y - y.mean())
        predicted: np.ndarray = self.x @ (x.T @ alpha) + y.mean()
        return predicted

    def __call__(self, tracker: BudgetedEvaluate) -> KernelConfig | None:
        """The next proposal (see the class), or None: too few ok trials, or nothing left."""
        import numpy as np

        predicted = self.predict(tracker)
        if predicted is None:
            return None
        self.calls += 1
        candidates = ~self.measured
        if self.calls % 2 == 0:
            order = np.argsort(np.array(self.ok_y), kind="stable")[: self.local_top]
            local = candidates & self.adjacent[[self.ok_rows[i] for i in order]].any(axis=0)
            if local.any():
                candidates = local
        if not candidates.any():
            return None
        return self.configs[int(np.argmin(np.where(candidates, predicted, np.inf)))]


def repaired(
    tracker: BudgetedEvaluate,
    blocked: KernelConfig,
    axes: Sequence[Axis],
    rng: random.Random,
    categorical: frozenset[str] = CATEGORICAL,
) -> list[KernelConfig]:
    """The repairs of a best-first step that cannot launch (pruned: invalid, compile error,
    out of resources): the unmeasured configs of the space one step from it (`neighbours`),
    in a seeded order. The step's centre, measured, is not among them, so each is the blocked
    move with one more step, most often along another axis: a larger tile with one stage
    fewer, a BLOCK_SIZE_K the constraints allow only with another GROUP_SIZE_M. Best-first
    would reach them only after every other neighbour of its centre (they are two axes from
    it), and a model fitted to the configs measured so far predicts them from the value
    that failed. On `kt_dedisp`'s MI250X problems the optimum's GROUP_SIZE_M cannot launch with
    the BLOCK_SIZE_K of vLLM's default, and its BLOCK_SIZE_K is 3x slower with the default's
    GROUP_SIZE_M: without repairs 6 of 10 seeds stopped at 0.739 of the optimum at 64 trials
    (bench/README.md).

    Args:
        tracker: the task's budgeted evaluate; `blocked` measured in it.
        blocked: the pruned config.
        axes, categorical: as for `neighbours`.
        rng: orders the repairs.
    """
    found = [
        c
        for c in neighbours(blocked, axes, categorical=categorical)
        if c in tracker.allowed and c not in tracker.results
    ]
    rng.shuffle(found)
    return found


def run_guided(
    tracker: BudgetedEvaluate,
    axes: Sequence[Axis],
    guide: RidgeGuide,
    *,
    seed: int,
    batch: Sequence[KernelConfig] = (),
    spread: int = SPREAD,
    guide_after: int = GUIDE_AFTER,
    transfer_tiles: int = TRANSFER_TILES,
    categorical: frozenset[str] = CATEGORICAL,
    fresh_axes_first: bool = FRESH_AXES_FIRST,
    prior: Mapping[KernelConfig, float] | None = None,
) -> None:
    """Search until the budget (or the space) is spent: best-first steps as `run_local` (with
    `categorical` axes), and after every `spread` of them the next tile of `batch` (`TileBatch`).
    A step that cannot launch (`PRUNED`) is followed by its `repaired` configs, which count as
    steps. A config that came other than by a step (a tile, a transfer, a guide's proposal, a
    repair) is first stepped from, once it is the fastest, along the last step's move that
    found a faster config: the pattern move of `run_local`, carried over to it.
    Once `guide_after` counted steps in a row neither found a faster config nor came within
    FLAT of the incumbent: the tiles left, one after another; then, the first time, `retiled`
    configs of the tiles measured; then the guide's proposals, until a config is faster
    (which restarts the steps). No choice depends on the budget, so a larger budget begins
    with the trials of a smaller one (what `tuner sweep` relies on to extend a sweep). Ties
    between near-equal configs are left to the re-timing's noise rule, as for every strategy.

    Args:
        tracker: the shared, budgeted evaluate (warm starts measured in it).
        axes: the axes of the space.
        guide: proposes the next config, or None (then a best-first step is taken).
        seed: seed of the order among neighbours and of random picks.
        batch: the tile batch, in the order its tiles are tried (empty: no tiles, no
            transfers).
        spread: see SPREAD.
        guide_after: see GUIDE_AFTER.
        transfer_tiles: see TRANSFER_TILES.
        categorical: see CATEGORICAL.
        fresh_axes_first: see FRESH_AXES_FIRST.
        prior: orders each centre's neighbours (`local.neighbourhood_order`); None: seeded.
    """
    _GuidedRun(
        tracker,
        axes,
        guide,
        _Settings(
            seed=seed,
            spread=spread,
            guide_after=guide_after,
            transfer_tiles=transfer_tiles,
            categorical=categorical,
            fresh_axes_first=fresh_axes_first,
            prior=prior,
        ),
        batch,
    ).run()


@dataclass(frozen=True)
class _Settings:
    """`run_guided`'s keyword arguments (see there)."""

    seed: int
    spread: int
    guide_after: int
    transfer_tiles: int
    categorical: frozenset[str]
    fresh_axes_first: bool
    prior: Mapping[KernelConfig, float] | None


class _GuidedRun:
    """One `run_guided` search: each turn proposes a config (a tile, a transfer or the guide's
    pick, `_proposal`) or else takes a step (a repair, a best-first step or a random config,
    `_step`), then keeps the books (`_bookkeeping`).

    Attributes:
        rng: orders the neighbours and draws the random configs.
        repair_rng: orders the repairs; their own generator, so that the steps' order stays
            the same whatever number of repairs came before.
        queues, moves: `best_first_step`'s neighbour queues and moves.
        incumbent: the fastest ok config so far and its latency_us, or None.
        tiles: the tile batch.
        stall: counted steps since the last faster config that were not within FLAT.
        since_tile: turns since the last tile.
        transfers: the `retiled` configs, built at the first stall, then drained.
        repairs: the `repaired` configs of pruned steps still to try.
        carried: the last move of a step that found a faster config.
    """

    def __init__(
        self,
        tracker: BudgetedEvaluate,
        axes: Sequence[Axis],
        guide: RidgeGuide,
        settings: _Settings,
        batch: Sequence[KernelConfig],
    ) -> None:
        self.tracker = tracker
        self.axes = axes
        self.guide = guide
        self.settings = settings
        self.rng = random.Random(settings.seed)
        self.repair_rng = random.Random(f"repair {settings.seed}")
        self.queues: dict[KernelConfig, list[KernelConfig]] = {}
        self.moves: dict[KernelConfig, tuple[int, ...]] = {}
        self.incumbent: tuple[KernelConfig, float] | None = tracker.incumbent()
        self.tiles = TileBatch(batch)
        self.stall = 0
        self.since_tile = 0
        self.transfers: list[KernelConfig] | None = None
        self.repairs: list[KernelConfig] = []
        self.carried: tuple[int, ...] | None = None

    def run(self) -> None:
        """Turns until the budget or the space is spent."""
        tracker = self.tracker
        while tracker.left > 0 and len(tracker.results) < len(tracker.allowed):
            candidate = self._proposal()
            if candidate is not None:
                self._bookkeeping(candidate, tracker(candidate), step=False)
            else:
                self._step()

    def _stalled(self) -> bool:
        return self.stall >= self.settings.guide_after

    def _proposal(self) -> KernelConfig | None:
        """The next tile when one is due (every `spread` turns, or each turn once stalled);
        else, once stalled, the next transfer or the guide's pick; else None."""
        candidate = None
        if self.since_tile >= self.settings.spread or self._stalled():
            candidate = self.tiles.next(self.tracker, self.incumbent)
        if candidate is not None:
            self.since_tile = 0
            return candidate
        self.since_tile += 1
        if not self._stalled():
            return None
        if self.transfers is None and self.incumbent is not None:
            self.transfers = retiled(
                self.tracker, self.tiles.measured, self.incumbent[0], self.settings.transfer_tiles
            )
        return self.transfers.pop(0) if self.transfers else self.guide(self.tracker)

    def _step(self) -> None:
        """Measure a repair, else a best-first step, else a random unmeasured config: the
        only kinds that count towards a stall. A pruned best-first step queues its repairs."""
        tracker, settings = self.tracker, self.settings
        step = False
        candidate = self._next_repair()
        if candidate is None:
            candidate = best_first_step(
                tracker,
                self.axes,
                self.rng,
                self.queues,
                self.moves,
                settings.categorical,
                fresh_axes_first=settings.fresh_axes_first,
                prior=settings.prior,
            )
            step = candidate is not None
        if candidate is None:
            candidate = self.rng.choice(
                [c for c in sorted(tracker.allowed, key=_key) if c not in tracker.results]
            )
        left = tracker.left
        result = tracker(candidate)
        self._count_stall(result, counted=tracker.left < left)
        if step and result is not None and result.status in PRUNED:
            self.repairs[:0] = repaired(
                tracker, candidate, self.axes, self.repair_rng, settings.categorical
            )
        self._bookkeeping(candidate, result, step=step)

    def _next_repair(self) -> KernelConfig | None:
        """The first queued repair not measured since, or None."""
        while self.repairs and self.repairs[0] in self.tracker.results:
            self.repairs.pop(0)
        return self.repairs.pop(0) if self.repairs else None

    def _count_stall(self, result: TrialResult | None, *, counted: bool) -> None:
        """A step that cost budget and came no closer than FLAT to the incumbent is a stall."""
        flat = (
            result is not None
            and result.ok
            and self.incumbent is not None
            and result.ok_latency_us <= self.incumbent[1] * (1 + FLAT)
        )
        self.stall += counted and not flat

    def _bookkeeping(
        self, candidate: KernelConfig, result: TrialResult | None, *, step: bool
    ) -> None:
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


def _key(config: KernelConfig) -> tuple[int, ...]:
    """KernelConfig's own order (its fields in turn), without a dataclass comparison per step."""
    return tuple(config.as_dict().values())


class GuidedStrategy(Strategy):
    """Warm starts, then `run_guided`: best-first steps (pruned ones repaired, `repaired`; a
    centre's neighbours ordered by the related tasks' prior, `prior.fit_prior`) with the block
    tiles (vLLM's default's tile batch, the large tiles with 8 warps too) tried between them at
    the settings tuned so far; at the first stall the tiles left and the runner-up tiles with
    the tuned settings (`retiled`), and `RidgeGuide`'s proposals whenever the steps stall.
    Configs pruned before launch (`budget.PRUNED`) cost no budget, so a task may store more
    than `budget` trials, of which at most `budget` were measured. What it measures after the
    warm starts depends on their results, so only they are `planned`."""

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
        """Measure `warm_start` in order, then `run_guided` to `budget` counted trials (see
        the class), each centre's neighbours ordered by `prior.fit_prior` of `related` (the
        ok trials of the device's related tasks) when there are enough of them."""
        tracker = BudgetedEvaluate(evaluate, space, budget, free=self.free)
        axes = space_axes(space)
        tracker.warm_start(warm_start)
        batch = first_batch(
            tracker.allowed, axes, warm_start, seed=seed, large_tile_warps=LARGE_TILE_WARPS
        )
        from threadpoolctl import threadpool_limits

        # The fits are small (a few hundred rows): a multi-threaded BLAS only spins its
        # threads (twice the CPU of a replayed sweep, measured in bench/README.md).
        with threadpool_limits(limits=1, user_api="blas"):
            guide = RidgeGuide(sorted(tracker.allowed, key=_key), axes)
            prior = fit_prior(guide.configs, guide.x, related, RIDGE) if related else None
            run_guided(
                tracker,
                axes,
                guide,
                seed=seed,
                batch=batch,
                fresh_axes_first=FRESH_AXES_FIRST,
                prior=prior,
            )
        return tracker.history
