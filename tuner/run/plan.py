"""Sweep planning: what a sweep tunes (shapes, M grid, config space, search), its tasks in the
store, and the plan `tuner sweep` shows before it measures (tasks, trials, distinct compiles and a
time estimate from the device's earlier trials or the default model of its runner, `trial_model`).
Importable without torch or triton: the HTTP service plans sweeps for remote workers."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from db import repo
from db.repo import TrialTimeRow, session_scope
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


@dataclass(frozen=True)
class TrialModel:
    """What a plan assumes of one way of measuring before the store has trials of the device.

    Attributes:
        trial_s: seconds a trial, plus `per_work_s` * N * K * ceil(M / 64) per kernel call.
        per_work_s: seconds per unit of work of a call (the interpreter), 0 for none.
        calls: kernel calls a trial makes (the check and the timed calls).
        compile_s: seconds per compile on one core, ahead and overlapped (a GPU); None: none.
        timeout_s: default --trial-timeout: seconds a config may take before its worker is
            killed.
        confirm_above_s: a plan estimated longer than this asks for --yes; None never asks.
        notes: lines the plan adds.
    """

    trial_s: float
    per_work_s: float = 0.0
    calls: int = 1
    compile_s: float | None = None
    timeout_s: float = 60.0
    confirm_above_s: float | None = None
    notes: tuple[str, ...] = ()

    def seconds(self, N: int, K: int, M: int) -> float:
        """The default seconds of one trial at (N, K, M)."""
        return self.trial_s + self.per_work_s * N * K * math.ceil(M / 64) * self.calls

    def source(self, device_name: str) -> str:
        """Where the plan's time comes from when the store has no trials of the device."""
        none = f"no earlier trials of {device_name} in the store"
        if self.compile_s is not None:
            return (
                f"{none}: default {self.trial_s * 1000:.0f} ms of measuring a trial, compiles at "
                f"{self.compile_s} s each on one core, overlapped"
            )
        if self.per_work_s:
            return (
                f"{none}: default {self.seconds(512, 1024, 64):.1f} s a trial at N=512, K=1024, "
                f"M<=64, {self.seconds(5120, 3072, 1):.0f} s at N=5120, K=3072"
            )
        return f"replayed: about {self.trial_s * 1000:.0f} ms a trial"


def trial_model(runner_name: str, interpreter_reps: int = 3) -> TrialModel:
    """The plan's model of a runner's trials, by the runner's name (`tuner.measure.runners`):
    on a GPU about 25 ms of measuring a searched trial and 0.6 s a compile on one core
    (bench/README.md); under a millisecond a replayed trial; on the interpreter the fitted cost
    of `interpreter_reps` timed calls and the check, an hour before --yes is asked."""
    if runner_name == "interpreter":
        note = (
            "on the interpreter nothing is compiled ahead (that is a GPU's cost) and the "
            "timings are CPU timings"
        )
        return TrialModel(
            INTERPRETER_TRIAL_S,
            INTERPRETER_S_PER_WORK,
            interpreter_reps + 1,
            timeout_s=1800.0,
            confirm_above_s=3600.0,
            notes=(note,),
        )
    if runner_name == "replay":
        return TrialModel(0.001)
    return TrialModel(0.025, compile_s=0.6, timeout_s=300.0)


@dataclass(frozen=True)
class SweepPreview:
    """What a `tuner sweep` command will do, counted before anything is written.

    Attributes:
        lines: the plan as printed, one block.
        estimate_s: the estimated seconds of measuring still to do.
        tasks: (N, K, M) tasks over every sweep of the command.
        trials: trials still to run (the planned ones minus those already stored).
    """

    lines: tuple[str, ...]
    estimate_s: float
    tasks: int
    trials: int


def duration(seconds: float) -> str:
    """A rounded duration for people: "40 s", "12 min", "3.5 h", "2.1 days"."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def _compiles(request: SweepRequest) -> int:
    """At most this many distinct (config, launch specialization) binaries: Triton compiles a
    config once per specialization of the launch (M = 1, M % 16 == 0, other M: Triton
    specializes integer arguments)."""
    family = get_family(request.family)
    space = len(request.space)
    per_task = request.trials_per_task()
    tasks_by_key: dict[str, int] = {}
    for N, K in request.shapes:
        shape = request.key(N, K).shape
        for M in request.m_values:
            key = family.specialization(shape, M)
            tasks_by_key[key] = tasks_by_key.get(key, 0) + 1
    searched = space if request.strategy == "grid" else min(request.trials, space)
    distinct = space + per_task - searched  # the space, and the default when outside it
    return sum(min(distinct, per_task * count) for count in tasks_by_key.values())


class _TrialClock:
    """Seconds per trial at (family, N, K, M): the device's own mean where it has trials
    there, else the runner's default model."""

    def __init__(self, model: TrialModel, history: Sequence[TrialTimeRow]):
        self.model = model
        self.exact = {(r.family, r.N, r.K, r.M): r.mean_s for r in history}
        self.trials = sum(r.trials for r in history)

    def seconds(self, family: str, N: int, K: int, M: int) -> float:
        key = (family, N, K, M)
        return self.exact[key] if key in self.exact else self.model.seconds(N, K, M)

    def source(self, device_name: str) -> str:
        if self.trials:
            return f"from {self.trials:,} earlier trial(s) of {device_name} in the store"
        return self.model.source(device_name)


def preview_sweeps(
    requests: Sequence[tuple[SweepRequest, str]],
    *,
    model: TrialModel,
    history: Sequence[TrialTimeRow],
    stored: Sequence[int],
    workers: int,
    compile_workers: int = 1,
    defaults: Sequence[str] = (),
    known: Sequence[Mapping[tuple[int, int, int], int]] = (),
) -> SweepPreview:
    """The plan of one `tuner sweep` command over its sweeps (dense, then each MoE shape):
    `requests` (each with what it tunes, "2 shapes"), timed by the device's `history`
    (`db.repo.trial_times`) where it has trials, else by `model` (`trial_model`); `stored`
    trials per request's sweep and `known` configs per task elsewhere
    (`db.repo.known_configs`) left out; `workers` measuring at once, each with
    `compile_workers` compile processes (a GPU); `defaults` lines appended."""
    clock = _TrialClock(model, history)
    first = requests[0][0]
    lines = [f"plan: {first.device_name}, {first.model} TP {first.tp}, {first.strategy}"]
    totals = [0.0, 0, 0, 0, 0]  # seconds, tasks, trials to run, compiles, reused
    for (request, what), done, measured in zip(
        requests, stored, list(known) or [{}] * len(requests), strict=True
    ):
        line, counts = _sweep_line(request, what, done, measured, clock)
        lines.append(line)
        totals = [a + b for a, b in zip(totals, counts, strict=True)]
    total_s, tasks, trials, compiles, reused = totals
    estimate_s = total_s / max(1, workers)
    what_takes = f"about {duration(estimate_s)} of measuring"
    if model.compile_s is not None:
        # Compiles overlap the measuring (tuner.run.compile_gate): the longer of the two counts.
        compile_s = compiles * model.compile_s / max(1, workers * compile_workers)
        what_takes = (
            f"about {duration(max(estimate_s, compile_s))}, the longer of "
            f"{duration(compile_s)} of compiling on {workers * compile_workers} "
            f"process(es) and {duration(estimate_s)} of measuring"
        )
        estimate_s = max(estimate_s, compile_s)
    lines.append(
        f"  total: {tasks} task(s), {trials:,} trial(s) to run"
        f"{f' ({reused:,} reused)' if reused else ''}, "
        f"{workers} worker(s); {what_takes} ({clock.source(first.device_name)})"
    )
    lines += [f"  {line}" for line in (*model.notes, *defaults)]
    return SweepPreview(tuple(lines), estimate_s, int(tasks), int(trials))


def _sweep_line(request: SweepRequest, what: str, done: int, measured, clock: _TrialClock):
    """One sweep's line of the plan and its (seconds, tasks, trials to run, compiles, reused),
    `done` trials stored in its sweep and `measured` configs known of each task elsewhere."""
    per_task = request.trials_per_task()
    nkm = [(N, K, M) for N, K in request.shapes for M in request.m_values]
    planned = len(nkm) * per_task
    # What each task still measures: its trials less those the store holds of it.
    todo = {key: per_task - min(per_task, measured.get(key, 0)) for key in nkm}
    left = max(0, planned - done) if not measured else sum(todo.values())
    reused = max(0, planned - left - done)
    seconds = sum(clock.seconds(request.family, *key) * todo[key] for key in nkm)
    seconds *= 1.0 if measured else (left / planned if planned else 0.0)
    compiles = _compiles(request)
    resumed = f", {done:,} already stored" if done else ""
    resumed += f", {reused:,} reused from other sweeps" if reused else ""
    # Only a GPU sweep compiles ahead of launch; the interpreter runs the Python source.
    compiled = f"; at most {compiles:,} distinct compiles" if clock.model.compile_s else ""
    line = (
        f"  {what} x {len(request.m_values)} M: {len(nkm)} task(s) x {per_task} "
        f"trial(s) = {planned:,} trial(s){resumed}{compiled}"
    )
    return line, (seconds, len(nkm), left, compiles, reused)


def needs_confirmation(preview: SweepPreview, model: TrialModel) -> bool:
    """True when the plan is too long to start unasked: estimated above the model's
    `confirm_above_s` (an hour on the interpreter; never on a GPU or a replay)."""
    return model.confirm_above_s is not None and preview.estimate_s > model.confirm_above_s
