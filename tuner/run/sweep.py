"""Sweep orchestration: start one worker per device for a planned sweep, show progress, and
say how it went."""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from db import repo
from db.repo import retry_store, session_scope
from tuner.core import TrialStatus
from tuner.kernels.config import KernelConfig
from tuner.run.plan import TRIAL_TIMEOUT_S, TRIAL_TIMEOUT_S_GPU, SweepRequest
from tuner.run.supervisor import Supervisor, SupervisorReport, first_line
from tuner.run.worker import WorkerSpec

if TYPE_CHECKING:
    from tuner.measure.runner import Runner


def progress_columns(unit: str) -> tuple:
    """The columns of the progress bars of `tuner sweep` and `tuner verify`: what, bar,
    done/total `unit`, elapsed, ETA (rich.progress columns)."""
    return (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(unit),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
    )


def worker_specs(
    db_url: str,
    *,
    runner: Runner,
    visible_devices: Sequence[str | None],
    configs: Sequence[KernelConfig] | None,
    sweep_id: int | None,
    device_name: str | None = None,
    space: str | None = None,
    kernel: str = "builtin",
) -> list[WorkerSpec]:
    """One worker template per visible device, in their order (the supervisor names each
    process it starts).

    Args:
        db_url: the store's URL.
        runner: how the workers measure (`tuner.measure.runner.make_runner`).
        visible_devices: CUDA_VISIBLE_DEVICES values (None: one CPU worker).
        configs: explicit candidates, or None for vLLM's space.
        sweep_id: claim only this sweep's tasks; None for every sweep in scope.
        device_name: claim only tasks of sweeps on this device; None for any.
        space: claim only tasks of sweeps over this config space; None for any.
        kernel: "builtin" or "vllm": whose kernels the workers time.

    A GPU runner's workers get the CPU count less one per GPU, shared between them, as
    compile processes (at least one each).
    """
    gpus = max(1, len(visible_devices))
    compile_workers = max(1, ((os.cpu_count() or 2) - gpus) // gpus) if runner.on_gpu else 0
    return [
        WorkerSpec(
            db_url=db_url,
            sweep_id=sweep_id,
            worker_id="",
            runner=runner,
            visible_device=device,
            configs=None if configs is None else tuple(configs),
            device_name=device_name,
            space=space,
            kernel=kernel,
            compile_workers=compile_workers,
        )
        for device in visible_devices
    ]


def supervisor(store, specs: list[WorkerSpec], trial_timeout_s: float | None, on_event):
    """The `Supervisor` of these workers, with `trial_timeout_s` or their runner's default
    (`TRIAL_TIMEOUT_S`: 300 s on CUDA, 1800 s on the interpreter, 60 s replaying)."""
    default_s = TRIAL_TIMEOUT_S.get(specs[0].runner.name, TRIAL_TIMEOUT_S_GPU)
    timeout_s = trial_timeout_s or default_s
    return Supervisor(store, specs, trial_timeout_s=timeout_s, on_event=on_event)


@dataclass(frozen=True)
class SweepSummary:
    """Outcome of one `tuner sweep` run: the sweep's progress in the store before and after
    (`db.repo.SweepProgress`), what the supervisor saw, and the wall-clock seconds."""

    sweep_id: int
    before: repo.SweepProgress
    now: repo.SweepProgress
    report: SupervisorReport
    wall_s: float


def _progress(store, sweep_id: int):
    """The sweep's `db.repo.sweep_progress`, read in a session of its own."""
    with session_scope(store) as session:
        return repo.sweep_progress(session, sweep_id=sweep_id)


def run_workers(
    store,
    db_url: str,
    request: SweepRequest,
    sweep_id: int,
    *,
    runner: Runner,
    visible_devices: Sequence[str | None],
    console=None,
    trial_timeout_s: float | None = None,
) -> SweepSummary:
    """Start one spawned worker per visible device (`visible_devices`: CUDA_VISIBLE_DEVICES
    values, None for one CPU worker) measuring with `runner` for the planned sweep `sweep_id`
    of `request` in `store` (at `db_url`), and wait, drawing a progress bar on `console`. A
    worker that dies is restarted while tasks remain (a crash or hang, past `trial_timeout_s`
    or the runner's default, is recorded against the config in flight).

    Raises:
        KeyboardInterrupt: Ctrl-C or SIGTERM; the tasks were handed back.
        db.connection.StoreUnavailable: the store stayed unavailable past its deadline; the
            workers were stopped, their tasks handed back where the store allowed.
    """
    specs = worker_specs(
        db_url,
        runner=runner,
        visible_devices=visible_devices,
        configs=request.configs,
        sweep_id=sweep_id,
        kernel=request.kernel,
    )
    start = time.perf_counter()
    read_progress = partial(_progress, store, sweep_id)  # its errors: the supervisor's to bound
    before = retry_store(read_progress, url=db_url, deadline_s=10.0)
    total = before.tasks_total * request.trials_per_task()
    with Progress(*progress_columns("trials"), console=console, transient=False) as bar:
        bar_id = bar.add_task(f"sweep {sweep_id}", total=total, completed=before.trials_total)

        def tick(now=None) -> None:
            now = now or read_progress()
            label = f"sweep {sweep_id}: {now.tasks_done}/{now.tasks_total} tasks"
            bar.update(bar_id, completed=min(now.trials_total, total), description=label)

        def event(line: str) -> None:
            bar.console.print(line, markup=False, highlight=False, soft_wrap=True)

        report = supervisor(store, specs, trial_timeout_s, event).run(tick)
        now = retry_store(read_progress, url=db_url, deadline_s=10.0)
        tick(now)
    return SweepSummary(sweep_id, before, now, report, time.perf_counter() - start)


def commonest_failure(store, sweep_id: int) -> str:
    """What went wrong most often in a sweep, for the one line of a sweep with no ok trial.

    Args:
        store: the store (its Engine).
        sweep_id: the sweep.

    Returns:
        E.g. `16 of 18 trials crashed: InterpreterError: TypeError('only 0-dimensional ...')`:
        the commonest (status, first line of the error) among the sweep's trials that are not
        ok, or among its failed tasks' errors when no trial was stored.
    """

    with session_scope(store) as session:
        tasks = repo.sweep_tasks(session, sweep_id=sweep_id)
        trials = [
            trial for task in tasks for trial in repo.task_trials(session, task_id=task.task_id)
        ]

    def first(text: str | None) -> str:
        return first_line(text, 300) or "no error text"

    failed = Counter(
        (trial.status, first(trial.error)) for trial in trials if trial.status != TrialStatus.OK
    )
    if failed:
        (status, error), n = failed.most_common(1)[0]
        return f"{n} of {len(trials)} trials {status}: {error}"
    errors = Counter(first(task.error) for task in tasks if task.state == repo.TaskState.FAILED)
    if errors:
        error, n = errors.most_common(1)[0]
        return f"{n} of {len(tasks)} tasks failed: {error}"
    return f"no trial of {len(trials)} ok"


def summary_lines(summary: SweepSummary) -> list[str]:
    """The closing lines of a sweep run: tasks and trials (this run's own: another command on
    the same sweep stores trials meanwhile), then where the time went, e.g. `compile 80.0 s,
    measure 300.2 s, wall 320.5 s`."""
    now, report, wall_s = summary.now, summary.report, summary.wall_s
    run_now = report.trials_stored + report.crashed + report.timeouts
    by_others = now.trials_total - summary.before.trials_total - run_now - report.trials_reused
    counts = [(report.crashed, "crashed"), (report.timeouts, "timed out")]
    elsewhere = [(report.trials_reused, "reused from other sweeps")]
    elsewhere.append((max(0, by_others), "run by other workers"))
    return [
        f"sweep {summary.sweep_id}: {now.tasks_done}/{now.tasks_total} tasks done, "
        f"{now.tasks_failed} failed; {run_now} trials run now{_some(elsewhere)} "
        f"({now.trials_total} stored, {now.trials_ok} ok{_some(counts)})",
        f"compile {report.compile_s:.1f} s, measure {report.measure_s:.1f} s, wall {wall_s:.1f} s",
    ]


def _some(counts: list[tuple[int, str]]) -> str:
    """ ", 2 crashed, 1 timed out": the counts that are not 0."""
    return "".join(f", {n} {what}" for n, what in counts if n)


def unfinished_in_scope(store, *, sweep_id: int | None, device_name: str, space: str) -> int:
    """The unfinished tasks a worker with this scope would claim (`tuner worker`).

    Args:
        store: the store (its Engine).
        sweep_id: only this sweep's tasks; None for every sweep on the device.
        device_name: vLLM's device key of the worker's GPUs.
        space: the worker's config space (`tuner.run.plan.space_name`).

    Returns:
        Pending and running tasks in scope.

    Raises:
        LookupError: `sweep_id` names no sweep.
        ValueError: the sweep is on another device or over another config space (one line).
    """

    with session_scope(store) as session:
        if sweep_id is not None:
            info = repo.get_sweep(session, sweep_id=sweep_id)
            if info is None:
                raise LookupError(sweep_id)
            if info.device_name != device_name:
                raise ValueError(f"sweep {sweep_id} is for {info.device_name}, not {device_name}")
            if info.space != space:
                raise ValueError(
                    f"sweep {sweep_id} searches config space {info.space}, this "
                    f"worker {space}: pass the --configs/--replay file and "
                    "--kernel the sweep was made with"
                )
        return repo.unfinished_tasks(
            session, sweep_id=sweep_id, device_name=device_name, space=space
        )
