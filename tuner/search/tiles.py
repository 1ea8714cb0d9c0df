"""The block tiles of a guided search: the tile batch, tried one tile at a time at the settings
tuned so far, and the runner-up tiles retried with the incumbent's tuned settings."""

from __future__ import annotations

from collections.abc import Sequence

from tuner.kernels.config import KernelConfig
from tuner.search.budget import BudgetedEvaluate


def with_tile(settings: KernelConfig, tile: KernelConfig) -> KernelConfig:
    """`settings` with the block tile (BLOCK_SIZE_M, BLOCK_SIZE_N) and num_warps of `tile`."""
    return KernelConfig(
        **{
            **settings.as_dict(),
            "BLOCK_SIZE_M": tile.BLOCK_SIZE_M,
            "BLOCK_SIZE_N": tile.BLOCK_SIZE_N,
            "num_warps": tile.num_warps,
        }
    )


class TileBatch:
    """The tile batch, tried one tile at a time: each with the incumbent's BLOCK_SIZE_K,
    GROUP_SIZE_M and num_stages when that config is in the space and new, else as drawn."""

    def __init__(self, batch: Sequence[KernelConfig]) -> None:
        """Args: batch: the tile batch, in the order its tiles are tried."""
        self.pending = list(batch)
        self.measured: list[KernelConfig] = []  # the configs tried for the tiles, in order

    def next(
        self, tracker: BudgetedEvaluate, incumbent: tuple[KernelConfig, float] | None
    ) -> KernelConfig | None:
        """The config to measure for the next tile not yet measured as drawn, or None."""
        while self.pending and (
            self.pending[0] in tracker.results or self.pending[0] not in tracker.allowed
        ):
            self.pending.pop(0)
        if not self.pending:
            return None
        config = self.pending.pop(0)
        if incumbent is not None:
            tuned = with_tile(incumbent[0], config)
            if tuned in tracker.allowed and tuned not in tracker.results:
                config = tuned
        self.measured.append(config)
        return config


def retiled(
    tracker: BudgetedEvaluate, tiles: Sequence[KernelConfig], incumbent: KernelConfig, count: int
) -> list[KernelConfig]:
    """Up to `count` unmeasured configs of the space: the incumbent with the block tile and
    num_warps of each of the fastest ok configs of `tiles`, fastest first, skipping the
    incumbent's own tile. A tile was measured with the settings (BLOCK_SIZE_K, GROUP_SIZE_M,
    num_stages) known when its turn came, which can hide its best (on the synthetic sm90
    landscape's 5120,3072,256, 128x128 w8 at num_stages=2 tied the default, at 5 stages it is
    the optimum); the incumbent's tuned ones rank the runners-up more fairly
    (bench/README.md).

    Args:
        tracker: the task's budgeted evaluate, the tiles measured in it.
        tiles: the configs measured for the tile batch, in order.
        incumbent: the fastest config so far.
        count: see `guided.TRANSFER_TILES`.
    """
    ranked = sorted(
        (tracker.results[c].latency_us, i)
        for i, c in enumerate(tiles)
        if c in tracker.results and tracker.results[c].ok
    )
    found: list[KernelConfig] = []
    for _, i in ranked:
        if len(found) == count:
            break
        tile = tiles[i]
        if (tile.BLOCK_SIZE_M, tile.BLOCK_SIZE_N) == (
            incumbent.BLOCK_SIZE_M,
            incumbent.BLOCK_SIZE_N,
        ):
            continue
        config = with_tile(incumbent, tile)
        if config in tracker.allowed and config not in tracker.results:
            found.append(config)
    return found
