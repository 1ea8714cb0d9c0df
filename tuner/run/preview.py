"""The plan `tuner sweep` shows before it measures: tasks, trials, distinct compiles and a time
estimate, from what the device has measured before (the store) or its runner's stated default
(`Runner.trial_model_s`). Pure arithmetic and text; the caller reads the store (`db.views`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from db.repo import TrialTimeRow
from tuner.kernels.registry import get_family
from tuner.measure.runners import Runner
from tuner.measure.runners.gpu import GPU_COMPILE_S
from tuner.run.plan import SweepRequest


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
        runner: Runner,
        history: Sequence[TrialTimeRow],
        calibration: tuple[tuple[int, int, int], float] | None = None,
    ):
        self.runner = runner
        self.calibration = calibration
        self.exact = {(r.family, r.N, r.K, r.M): r.mean_s for r in history}
        self.trials = sum(r.trials for r in history)
        sums: dict[str, tuple[float, float]] = {}
        for row in history:
            measured, modelled = sums.get(row.family, (0.0, 0.0))
            sums[row.family] = (
                measured + row.mean_s * row.trials,
                modelled + runner.trial_model_s(row.N, row.K, row.M) * row.trials,
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
            self.measured_scale = measured_s / runner.trial_model_s(N, K, M)

    def seconds(self, family: str, N: int, K: int, M: int) -> float:
        if (family, N, K, M) in self.exact:
            return self.exact[(family, N, K, M)]
        return self.scale.get(family, self.measured_scale) * self.runner.trial_model_s(N, K, M)

    def source(self, device_name: str) -> str:
        if self.trials:
            return f"from {self.trials:,} earlier trial(s) of {device_name} in the store"
        return self.runner.model_source(device_name, self.calibration)


def preview_sweeps(
    requests: Sequence[tuple[SweepRequest, str]],
    *,
    runner: Runner,
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
        runner: how the sweep measures (its time model, whether it compiles for a GPU).
        history: the device's earlier trial times (`db.repo.trial_times`).
        stored: trials each request's sweep already holds (0 for a new sweep), same order.
        workers: processes measuring at once (one per matching GPU; 1 on the CPU).
        compile_workers: compile processes per GPU worker (GPU runners only).
        defaults: lines about what was not given and so defaulted (the M grid, TP).
        calibration: ((N, K, M), seconds) of one interpreter trial measured on this host
            (`Runner.calibration`): scales the runner's model where the store has no trials
            of the family; None keeps the model as it is.
        known: per request, (N, K, M) -> distinct configs the store holds of that
            measurement in any sweep (`db.repo.known_configs`): a task measures only the rest
            of its trials, the others are reused; () for none.

    Returns:
        The plan's lines and counts.
    """
    clock = _TrialClock(runner, history, calibration)
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
        compiled = f"; at most {compiles:,} distinct compiles" if runner.on_gpu else ""
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
    if runner.on_gpu:
        # Compiles overlap the measuring (tuner.run.compile_gate): the longer of the two counts.
        compile_s = total_compiles * GPU_COMPILE_S / max(1, workers * compile_workers)
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
    lines += [f"  {line}" for line in runner.plan_notes()]
    lines += [f"  {line}" for line in defaults]
    return SweepPreview(
        lines=tuple(lines), estimate_s=measure_s, tasks=total_tasks, trials=total_trials
    )


def needs_confirmation(preview: SweepPreview, runner: Runner) -> bool:
    """True when the plan is too long to start unasked: estimated above the runner's
    `confirm_above_s` (an hour on the interpreter; never on a GPU or a replay)."""
    return runner.confirm_above_s is not None and preview.estimate_s > runner.confirm_above_s
