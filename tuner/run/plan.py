"""Sweep planning: what a sweep tunes (shapes, M grid, config space, search) and its tasks in the
store. Importable without torch or triton: the HTTP service plans sweeps for remote workers."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from db import repo
from db.repo import session_scope
from tuner.kernels.config import KernelConfig
from tuner.kernels.registry import DEFAULT_FAMILY, get_family
from tuner.kernels.shape import FamilyShape, Shape, as_block_shape, store_columns


def space_name(configs: Sequence[KernelConfig] | None, replay: str | None, kernel: str = "") -> str:
    """The name of a config space, part of a sweep's key; workers claim only sweeps of theirs.

    Args:
        configs: an explicit candidate list, or None for vLLM's space.
        replay: the landscape file when replaying, else None.
        kernel: the kernel source's label (`tuner.kernels.source.kernel_label`): "" for the
            builtin kernels, "vllm-0.33.0" for an installed vLLM's; a sweep of vLLM's kernels
            is another sweep than one of the builtin, with its own tasks and trials.

    Returns:
        "vllm", or "custom:<sha256 prefix>" of an explicit list, with "@replay:<sha256 prefix>"
        of the landscape file when replaying and "@kernel:<label>" for vLLM's kernels.

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
    if kernel:
        name += f"@kernel:{kernel}"
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
        configs: explicit candidates, or None for the family's space (vLLM's grid: 1,280
            configs for the dense GEMM).
        replay: a landscape file whose recorded timings answer instead of a device.
        family: the kernel family every task of the sweep tunes (`tuner.kernels.registry`).
        params: the family's dimensions beyond N and K, sorted (name, value) pairs, as
            `tuner.kernels.shape.Shape.params` (() for none).
        kernel: "builtin" or "vllm": whose kernels the sweep's trials time.
        kernel_label: how the space name tells the source (`space_name`'s `kernel`).
    """

    device_name: str
    model: str
    tp: int
    shapes: tuple[tuple[int, int], ...]
    block_shape: tuple[int, int] | None
    m_values: tuple[int, ...]
    strategy: str
    trials: int
    seed: int
    out_dtype: str
    configs: tuple[KernelConfig, ...] | None = None
    replay: str | None = None
    family: str = DEFAULT_FAMILY
    params: tuple[tuple[str, int], ...] = ()
    kernel: str = "builtin"
    kernel_label: str = ""

    @property
    def space(self) -> list[KernelConfig]:
        """Candidate configs of every task."""
        if self.configs is not None:
            return list(self.configs)
        return get_family(self.family).space()

    @property
    def space_name(self) -> str:
        """The sweep's config space name (see `space_name`)."""
        return space_name(self.configs, self.replay, self.kernel_label)

    @property
    def budget(self) -> int:
        """Trials per task as stored on the sweep: the whole space plus the default for grid,
        `trials` for optuna."""
        return len(self.space) + 1 if self.strategy == "grid" else self.trials

    def sweep_spec(self) -> repo.SweepSpec:
        """The store's `db.repo.SweepSpec` of this request."""
        return repo.SweepSpec(
            device_name=self.device_name,
            model=self.model,
            tp=self.tp,
            strategy=self.strategy,
            budget=self.budget,
            space=self.space_name,
            seed=self.seed,
            m_values=list(self.m_values),
            out_dtype=self.out_dtype,
            block_shape=self.block_shape,
            shapes=list(self.shapes),
            **store_columns(self.family, self.params),
            family_in_key=get_family(self.family).shapes.sweep_key_has_family,
        )

    def key(self, N: int, K: int) -> FamilyShape:
        """The family and shape of the sweep's tasks at (N, K)."""
        return FamilyShape(self.family, Shape(N, K, as_block_shape(self.block_shape), self.params))

    def trials_per_task(self) -> int:
        """Distinct configs each task measures: the budget, plus the default if outside it (the
        progress bar's total; a family whose default changes with M counts the first M's)."""
        space = self.space
        family = get_family(self.family)
        shape = self.key(*self.shapes[0]).shape
        extra = 0 if family.default_config(shape, self.m_values[0]) in space else 1
        if self.strategy == "grid":
            return len(space) + extra
        return min(self.trials, len(space)) + extra


def plan(store, request: SweepRequest):
    """Create the sweep and its tasks in the store, find it when the same sweep exists, or
    extend it when it exists with a smaller trial budget (`db.repo.open_sweep`).

    Args:
        store: the store (its Engine).
        request: what to tune.

    Returns:
        `db.repo.OpenedSweep`: the sweep and what was done ("new", "resumed", "extended", or
        "kept" when the stored sweep has a larger budget than asked).
    """

    with session_scope(store) as session:
        return repo.open_sweep(session, request.sweep_spec())


def opened_label(opened) -> str:
    """How `tuner sweep` names what `plan` did, e.g. "new", "resumed" or "extended from 3 to 4
    trials per task, 4 done task(s) reopened".

    Args:
        opened: `db.repo.OpenedSweep`.
    """
    if opened.outcome == "extended":
        return (
            f"extended from {opened.previous_budget} to {opened.info.budget} trials per "
            f"task, {opened.reopened} done task(s) reopened"
        )
    if opened.outcome == "kept":
        return f"resumed at its {opened.info.budget} trials per task, more than asked"
    return opened.outcome


def model_requests(model_shapes, **common) -> list[tuple[SweepRequest, str]]:
    """The sweeps a model needs, each of one kernel family and one set of its params: a family
    tunes its shapes in one sweep per params (the dense GEMM: all its (N, K) in one), or each
    shape in its own where it says so (`FamilyShapes.sweep_per_shape`: fused-MoE experts).

    A sweep has one block shape too: its shapes' (`Shape.block_shape`, which the family's
    shapes parser gives: the model's, or None for a family without block scales), whatever
    `common` says.

    Args:
        model_shapes: `tuner.inputs.shapes.ModelShapes` (its shapes per family, `groups`).
        common: every other `SweepRequest` field (device, model, M grid, strategy, ...).

    Returns:
        (request, a few words on what it tunes, `FamilyShapes.describe_shapes`) per sweep, in
        the registry's order of families (the dense one first).
    """
    requests = []
    for name, shapes in model_shapes.groups.items():
        family = get_family(name)
        batches: dict[object, list[Shape]] = {}
        for index, shape in enumerate(shapes):
            group = index if family.shapes.sweep_per_shape else (shape.params, shape.block_shape)
            batches.setdefault(group, []).append(shape)
        for batch in batches.values():
            request = SweepRequest(
                **{
                    **common,
                    "shapes": tuple((shape.N, shape.K) for shape in batch),
                    "family": name,
                    "params": batch[0].params,
                    "block_shape": batch[0].block_shape,
                }
            )
            requests.append((request, family.shapes.describe_shapes(batch)))
    return requests
