"""The plan `tuner sweep` shows before it measures: tasks, trials, distinct compiles and a time
estimate, from what the device has measured before (the store) or the default model of its way of
measuring (`trial_model`). Pure arithmetic and text; the caller reads the store (`db.views`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from db.repo import TrialTimeRow
from tuner.kernels.registry import get_family
from tuner.run.plan import SweepRequest

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
        calibrate: scale the model by a trial measured on this host now (the interpreter:
            the CPU's speed and load vary several times between hosts and hours).
    """

    trial_s: float
    per_work_s: float = 0.0
    calls: int = 1
    compile_s: float | None = None
    timeout_s: float = 60.0
    confirm_above_s: float | None = None
    notes: tuple[str, ...] = ()
    calibrate: bool = False

    def seconds(self, N: int, K: int, M: int) -> float:
        """The default seconds of one trial at (N, K, M)."""
        return self.trial_s + self.per_work_s * N * K * math.ceil(M / 64) * self.calls

    def source(
        self, device_name: str, calibration: tuple[tuple[int, int, int], float] | None
    ) -> str:
        """Where the plan's time comes from when the store has no trials of the device."""
        none = f"no earlier trials of {device_name} in the store"
        if calibration is not None:
            (N, K, M), measured_s = calibration
            at = f"{measured_s:.2f} s at N={N}, K={K}, M={M}"
            return f"{none}: scaled by a trial measured here now, {at}"
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
            INTERPRETER_TRIAL_S, INTERPRETER_S_PER_WORK, interpreter_reps + 1, timeout_s=1800.0,
            confirm_above_s=3600.0, notes=(note,), calibrate=True,
        )  # fmt: skip
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
    there; else the runner's default model, scaled by how the device's earlier trials of the
    family compared with that model; else the model as it is."""

    def __init__(
        self,
        model: TrialModel,
        history: Sequence[TrialTimeRow],
        calibration: tuple[tuple[int, int, int], float] | None = None,
    ):
        self.model = model
        self.calibration = calibration
        self.exact = {(r.family, r.N, r.K, r.M): r.mean_s for r in history}
        self.trials = sum(r.trials for r in history)
        sums: dict[str, tuple[float, float]] = {}
        for row in history:
            measured, modelled = sums.get(row.family, (0.0, 0.0))
            sums[row.family] = (
                measured + row.mean_s * row.trials,
                modelled + model.seconds(row.N, row.K, row.M) * row.trials,
            )
        self.scale = {
            family: measured / modelled
            for family, (measured, modelled) in sums.items()
            if modelled > 0
        }
        # No trials of a family yet: the model scaled by a trial measured here now.
        self.measured_scale = 1.0
        if self.calibration is not None:
            (N, K, M), measured_s = self.calibration
            self.measured_scale = measured_s / model.seconds(N, K, M)

    def seconds(self, family: str, N: int, K: int, M: int) -> float:
        if (family, N, K, M) in self.exact:
            return self.exact[(family, N, K, M)]
        return self.scale.get(family, self.measured_scale) * self.model.seconds(N, K, M)

    def source(self, device_name: str) -> str:
        if self.trials:
            return f"from {self.trials:,} earlier trial(s) of {device_name} in the store"
        return self.model.source(device_name, self.calibration)


def preview_sweeps(
    requests: Sequence[tuple[SweepRequest, str]],
    *,
    model: TrialModel,
    history: Sequence[TrialTimeRow],
    stored: Sequence[int],
    workers: int,
    compile_workers: int = 1,
    defaults: Sequence[str] = (),
    calibration: tuple[tuple[int, int, int], float] | None = None,
    known: Sequence[Mapping[tuple[int, int, int], int]] = (),
) -> SweepPreview:
    """The plan of one `tuner sweep` command over its sweeps (dense, then each MoE shape).

    Args:
        requests: each sweep's request and what it tunes ("2 shapes", "MoE E=...").
        model: the model of the sweep's trials (`trial_model`).
        history: the device's earlier trial times (`db.repo.trial_times`).
        stored: trials each request's sweep already holds (0 for a new sweep), same order.
        workers: processes measuring at once (one per matching GPU; 1 on the CPU).
        compile_workers: compile processes per GPU worker (GPU runners only).
        defaults: lines about what was not given and so defaulted (the M grid, TP).
        calibration: ((N, K, M), seconds) of one interpreter trial measured on this host
            (`tuner.measure.calibrate`): scales the runner's model where the store has no trials
            of the family; None keeps the model as it is.
        known: per request, (N, K, M) -> distinct configs the store holds of that
            measurement in any sweep (`db.repo.known_configs`): a task measures only the rest
            of its trials, the others are reused; () for none.

    Returns:
        The plan's lines and counts.
    """
    clock = _TrialClock(model, history, calibration)
    first = requests[0][0]
    lines = [f"plan: {first.device_name}, {first.model} TP {first.tp}, {first.strategy}"]
    total_s, total_tasks, total_trials, total_compiles = 0.0, 0, 0, 0
    known = list(known) or [{}] * len(requests)
    total_reused = 0
    for (request, what), done, measured in zip(requests, stored, known, strict=True):
        per_task = request.trials_per_task()
        nkm = [(N, K, M) for N, K in request.shapes for M in request.m_values]
        tasks = len(nkm)
        planned = tasks * per_task
        # What each task still measures: its trials less those the store holds of it.
        todo = {key: per_task - min(per_task, measured.get(key, 0)) for key in nkm}
        left = max(0, planned - done) if not measured else sum(todo.values())
        reused = max(0, planned - left - done)
        seconds = sum(clock.seconds(request.family, *key) * todo[key] for key in nkm)
        seconds *= 1.0 if measured else (left / planned if planned else 0.0)
        compiles = _compiles(request)
        resumed = f", {done:,} already stored" if done else ""
        resumed += f", {reused:,} reused from other sweeps" if reused else ""
        total_reused += reused
        # Only a GPU sweep compiles ahead of launch; the interpreter runs the Python source.
        compiled = f"; at most {compiles:,} distinct compiles" if model.compile_s else ""
        lines.append(
            f"  {what} x {len(request.m_values)} M: {tasks} task(s) x {per_task} "
            f"trial(s) = {planned:,} trial(s){resumed}{compiled}"
        )
        total_s += seconds
        total_tasks += tasks
        total_trials += left
        total_compiles += compiles
    measure_s = total_s / max(1, workers)
    what_takes = f"about {duration(measure_s)} of measuring"
    if model.compile_s is not None:
        # Compiles overlap the measuring (tuner.run.compile_gate): the longer of the two counts.
        compile_s = total_compiles * model.compile_s / max(1, workers * compile_workers)
        what_takes = (
            f"about {duration(max(measure_s, compile_s))}, the longer of "
            f"{duration(compile_s)} of compiling on {workers * compile_workers} "
            f"process(es) and {duration(measure_s)} of measuring"
        )
        measure_s = max(measure_s, compile_s)
    lines.append(
        f"  total: {total_tasks} task(s), {total_trials:,} trial(s) to run"
        f"{f' ({total_reused:,} reused)' if total_reused else ''}, "
        f"{workers} worker(s); {what_takes} ({clock.source(first.device_name)})"
    )
    lines += [f"  {line}" for line in model.notes]
    lines += [f"  {line}" for line in defaults]
    return SweepPreview(
        lines=tuple(lines), estimate_s=measure_s, tasks=total_tasks, trials=total_trials
    )


def needs_confirmation(preview: SweepPreview, model: TrialModel) -> bool:
    """True when the plan is too long to start unasked: estimated above the model's
    `confirm_above_s` (an hour on the interpreter; never on a GPU or a replay)."""
    return model.confirm_above_s is not None and preview.estimate_s > model.confirm_above_s
