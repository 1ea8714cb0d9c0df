"""Sweep planning: what a sweep tunes (shapes, M grid, config space, search) and its tasks in the
store. Importable without torch or triton: the HTTP service plans sweeps for remote workers."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.space import default_config, vllm_space

# Seconds a claimed task stays leased without a heartbeat (workers renew it every quarter).
DEFAULT_LEASE_S = 120.0


def space_name(configs: Sequence[KernelConfig] | None, replay: str | None) -> str:
    """The name of a config space, part of a sweep's key; workers claim only sweeps of theirs.

    Args:
        configs: an explicit candidate list, or None for vLLM's space.
        replay: the landscape file when replaying, else None.

    Returns:
        "vllm", or "custom:<sha256 prefix>" of an explicit list, with "@replay:<sha256 prefix>"
        of the landscape file when replaying.

    Raises:
        OSError: the landscape file cannot be read.
    """
    name = "vllm"
    if configs is not None:
        text = json.dumps([config.as_dict() for config in configs])
        name = "custom:" + hashlib.sha256(text.encode()).hexdigest()[:16]
    if replay is not None:
        digest = hashlib.sha256(Path(replay).read_bytes()).hexdigest()[:16]
        name += f"@replay:{digest}"
    return name


@dataclass(frozen=True)
class SweepRequest:
    """What `tuner sweep` was asked to do.

    Attributes:
        device_name: vLLM's key of the device, e.g. "NVIDIA_L20" or "TRITON_INTERPRETER".
        model: key of a `shapes/` file.
        tp: tensor-parallel size.
        shapes: (N, K) of the model at that TP.
        block_shape: [group_n, group_k].
        m_values: batch sizes M to tune, ascending.
        strategy: "grid" or "optuna".
        trials: distinct configs per task for optuna (the default config included).
        seed: seed of every task's search and inputs.
        out_dtype: "bfloat16" or "float16".
        configs: explicit candidates, or None for vLLM's 1,280-config space.
        replay: a landscape file whose recorded timings answer instead of a device.
    """

    device_name: str
    model: str
    tp: int
    shapes: tuple[tuple[int, int], ...]
    block_shape: tuple[int, int]
    m_values: tuple[int, ...]
    strategy: str
    trials: int
    seed: int
    out_dtype: str
    configs: tuple[KernelConfig, ...] | None = None
    replay: str | None = None

    @property
    def space(self) -> list[KernelConfig]:
        """Candidate configs of every task."""
        return list(self.configs) if self.configs is not None else vllm_space()

    @property
    def space_name(self) -> str:
        """The sweep's config space name (see `space_name`)."""
        return space_name(self.configs, self.replay)

    @property
    def budget(self) -> int:
        """Trials per task as stored on the sweep: the whole space plus the default for grid,
        `trials` for optuna."""
        return len(self.space) + 1 if self.strategy == "grid" else self.trials

    def sweep_fields(self) -> dict:
        """Keyword arguments of `db.repo.create_sweep` for this request."""
        return {
            "device_name": self.device_name, "model": self.model, "tp": self.tp,
            "strategy": self.strategy, "budget": self.budget, "space": self.space_name,
            "seed": self.seed, "m_values": list(self.m_values), "out_dtype": self.out_dtype,
            "block_shape": self.block_shape, "shapes": list(self.shapes),
        }

    def trials_per_task(self) -> int:
        """Distinct configs each task measures: the budget, plus the default if outside it."""
        space = self.space
        extra = 0 if default_config(self.block_shape) in space else 1
        if self.strategy == "grid":
            return len(space) + extra
        return min(self.trials, len(space)) + extra


def plan(engine, request: SweepRequest):
    """Create the sweep and its tasks in the store, or find them when the same sweep exists.

    Args:
        engine: the store's engine.
        request: what to tune.

    Returns:
        (SweepInfo, created): created is False when this resumes an earlier run.
    """
    from db import repo
    from db.engine import session_scope

    with session_scope(engine) as session:
        return repo.create_sweep(session, **request.sweep_fields())
