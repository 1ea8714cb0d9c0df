"""Sweep planning: what a sweep tunes (shapes, M grid, config space, search), its tasks in the
store, and the plan `tuner sweep` shows before it measures (tasks, trials and a time estimate from
the device's earlier trials or its runner's default, `default_trial_s`).
Importable without torch or triton: the HTTP service plans sweeps for remote workers."""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from db import repo
from db.repo import TrialTimeRow
from tuner.kernels.config import KernelConfig
from tuner.kernels.registry import DEFAULT_FAMILY, get_family
from tuner.kernels.shape import Shape, as_block_shape, store_columns


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
            space=space_name(self.configs, self.replay, self.kernel_label),
            seed=self.seed,
            m_values=list(self.m_values),
            out_dtype=self.out_dtype,
            block_shape=self.block_shape,
            shapes=list(self.shapes),
            **store_columns(self.family, self.params),
            family_in_key=get_family(self.family).shapes.sweep_key_has_family,
        )

    def trials_per_task(self) -> int:
        """Distinct configs each task measures: the budget, plus the default if outside it (the
        progress bar's total; a family whose default changes with M counts the first M's)."""
        shape = Shape(*self.shapes[0], as_block_shape(self.block_shape), self.params)
        default = get_family(self.family).default_config(shape, self.m_values[0])
        return trial_cap(self.budget, self.space, default)


def trial_cap(budget: int, space, default) -> int:
    """Most distinct configs a task stores: min(budget, distinct configs of the space), plus 1
    for vLLM's `default` config at the task's M when it is outside the space (every task
    measures it)."""
    allowed = set(space)
    return min(budget, len(allowed)) + (default not in allowed)


def model_requests(model_shapes, **common) -> list[tuple[SweepRequest, str]]:
    """The sweeps a model needs, each of one kernel family and one set of its params: a family
    tunes its shapes in one sweep per params (the dense GEMM: all its (N, K) in one), or each
    shape in its own where it says so (`FamilyShapes.sweep_per_shape`: fused-MoE experts).

    The model, its TP and each sweep's block shape come from `model_shapes` (a sweep's block
    shape is its shapes', `Shape.block_shape`: the model's, or None for a family without block
    scales).

    Args:
        model_shapes: `tuner.inputs.shapes.ModelShapes` (its shapes per family, `groups`).
        common: every other `SweepRequest` field (device, M grid, strategy, ...).

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
                    "model": model_shapes.model,
                    "tp": model_shapes.tp,
                    "shapes": tuple((shape.N, shape.K) for shape in batch),
                    "family": name,
                    "params": batch[0].params,
                    "block_shape": batch[0].block_shape,
                }
            )
            requests.append((request, family.shapes.describe_shapes(batch)))
    return requests


# The interpreter's cost per kernel call (the check and each timed call), in seconds per unit of
# N * K * ceil(M / 64) beyond INTERPRETER_TRIAL_S a trial: fitted to interpreter runs on a
# 2-core host (about 0.1 s a call at M=64, N=512, K=1024; 3 s at M=1, N=5120, K=3072), a field
# report (about 37 s a trial for qwen3.8-27b at M=1) and the README's `tiny` sweep.
INTERPRETER_TRIAL_S = 0.7
INTERPRETER_S_PER_WORK = 0.1 / (512 * 1024)


def default_trial_s(runner_name: str, N: int, K: int, M: int, reps: int = 3) -> float:
    """Seconds of one trial at (N, K, M) before the store has trials of the device: on the
    interpreter the fitted cost of `reps` timed calls and the check, a millisecond replayed,
    on a GPU 25 ms of measuring plus a 0.6 s compile shared by the host's other cores
    (bench/README.md; estimates, not measured on a GPU)."""
    if runner_name == "interpreter":
        work = N * K * math.ceil(M / 64) * (reps + 1)
        return INTERPRETER_TRIAL_S + INTERPRETER_S_PER_WORK * work
    if runner_name == "replay":
        return 0.001
    return 0.025 + 0.6 / max(1, (os.cpu_count() or 2) - 1)


def duration(seconds: float) -> str:
    """A rounded duration for people: "40 s", "12 min", "3.5 h", "2.1 days"."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def plan_lines(
    requests: Sequence[tuple[SweepRequest, str]],
    *,
    runner_name: str,
    reps: int,
    history: Sequence[TrialTimeRow],
    stored: Sequence[int],
    workers: int,
) -> list[str]:
    """The plan of one `tuner sweep` command over its sweeps (dense, then each MoE shape):
    `requests` (each with what it tunes, "2 shapes"), their tasks and trials less the
    `stored` trials of each request's sweep, and the time of `workers` measuring at once:
    each (N, K, M) at the device's mean in `history` (`db.repo.trial_times`) where it has
    trials there, else at `default_trial_s`."""
    timed = {(r.family, r.N, r.K, r.M): r.mean_s for r in history}
    first = requests[0][0]
    lines = [f"plan: {first.device_name}, {first.model} TP {first.tp}, {first.strategy}"]
    tasks = trials = 0
    seconds = 0.0
    for (request, what), done in zip(requests, stored, strict=True):
        per_task = request.trials_per_task()
        nkm = [(N, K, M) for N, K in request.shapes for M in request.m_values]
        planned = len(nkm) * per_task
        left = max(0, planned - done)
        each = [
            timed.get((request.family, *key)) or default_trial_s(runner_name, *key, reps)
            for key in nkm
        ]
        seconds += sum(each) * per_task * left / planned
        resumed = f", {done:,} already stored" if done else ""
        lines.append(
            f"  {what} x {len(request.m_values)} M: {len(nkm)} task(s) x {per_task} "
            f"trial(s) = {planned:,} trial(s){resumed}"
        )
        tasks, trials = tasks + len(nkm), trials + left
    device = first.device_name
    source = f"default for a new device: no earlier trials of {device} in the store"
    if history:
        source = f"from {sum(r.trials for r in history):,} earlier trial(s) of {device}"
    lines.append(
        f"  total: {tasks} task(s), {trials:,} trial(s) to run, {workers} worker(s); "
        f"about {duration(seconds / max(1, workers))} ({source})"
    )
    return lines
