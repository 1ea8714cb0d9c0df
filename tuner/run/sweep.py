"""Sweep orchestration: plan tasks in the store, start one worker per device, show progress."""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
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
from tuner.run.options import RunOptions
from tuner.run.plan import SweepRequest
from tuner.run.supervisor import Supervisor
from tuner.run.worker_spec import WorkerSpec

if TYPE_CHECKING:
    from tuner.measure.runners import Runner


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
    compile_workers: int | None = None,
    kernel: str = "builtin",
    options: RunOptions | None = None,
) -> list[WorkerSpec]:
    """One worker template per visible device (the supervisor names each process it starts).

    Args:
        db_url: the store's URL.
        runner: how the workers measure (`tuner.measure.runners.make_runner`).
        visible_devices: CUDA_VISIBLE_DEVICES values (None: one CPU worker).
        configs: explicit candidates, or None for vLLM's space.
        sweep_id: claim only this sweep's tasks; None for every sweep in scope.
        device_name: claim only tasks of sweeps on this device; None for any.
        space: claim only tasks of sweeps over this config space; None for any.
        compile_workers: GPU runners only: compile processes per worker that compile candidates for
            the GPU while it measures, and prune those that cannot launch; None for the CPU
            count minus one per GPU, shared between the GPUs (at least one each); 0 for none.
        kernel: "builtin" or "vllm": whose kernels the workers time.
        options: how they measure and hold tasks; None for `RunOptions()`.

    Returns:
        The specs, in the order of `visible_devices`.
    """
    if not runner.on_gpu:
        compile_workers = 0
    elif compile_workers is None:
        compile_workers = max(
            1, ((os.cpu_count() or 2) - len(visible_devices)) // max(1, len(visible_devices))
        )
    items = None
    if configs is not None:
        items = tuple(tuple(config.as_dict().items()) for config in configs)
    return [
        WorkerSpec(
            db_url=db_url,
            sweep_id=sweep_id,
            worker_id="",
            runner=runner,
            visible_device=device,
            configs=items,
            device_name=device_name,
            space=space,
            compile_workers=compile_workers,
            kernel=kernel,
            options=options or RunOptions(),
        )
        for device in visible_devices
    ]


@dataclass(frozen=True)
class SweepSummary:
    """Outcome of one `tuner sweep` run, counted from the store."""

    sweep_id: int
    tasks_done: int
    tasks_failed: int
    tasks_total: int
    trials_total: int
    trials_ok: int
    trials_run_now: int
    wall_s: float
    worker_failures: int
    trials_crashed_now: int = 0
    trials_timed_out_now: int = 0
    trials_reused: int = 0
    trials_by_others: int = 0
    times: SweepTimes | None = None


def run_workers(
    store,
    db_url: str,
    request: SweepRequest,
    sweep_id: int,
    *,
    runner: Runner,
    visible_devices: Sequence[str | None],
    console=None,
    options: RunOptions | None = None,
) -> SweepSummary:
    """Start one spawned worker per visible device and wait, drawing a progress bar.

    A worker that dies is restarted while tasks remain (tuner.run.supervisor: a crash or hang is
    recorded against the config in flight); Ctrl-C or SIGTERM stops the workers and hands
    their tasks back for the next run.

    Args:
        store: the store (its Engine).
        db_url: the store's URL, for the workers.
        request: what to tune.
        sweep_id: the planned sweep.
        runner: how the workers measure (`tuner.measure.runners.make_runner`).
        visible_devices: one CUDA_VISIBLE_DEVICES value per worker (None: one CPU worker).
        console: rich console of the progress bar.
        options: how the workers measure and hold tasks, and the trial timeout; None for
            `RunOptions()`.

    Returns:
        Counts from the store before and after.

    Raises:
        KeyboardInterrupt: Ctrl-C or SIGTERM; the tasks were handed back.
        db.faults.StoreUnavailable: the store stayed unavailable past its deadline
            (`db.faults.store_timeout_s`); the workers were stopped, their tasks handed back
            where the store allowed.
    """

    options = options or RunOptions()
    specs = worker_specs(
        db_url,
        runner=runner,
        visible_devices=visible_devices,
        configs=request.configs,
        sweep_id=sweep_id,
        kernel=request.kernel,
        options=options,
    )
    start = time.perf_counter()
    read_progress, progress_now = _progress_readers(store, db_url, sweep_id)
    before = progress_now()
    total = before.tasks_total * request.trials_per_task()
    with Progress(*progress_columns("trials"), console=console, transient=False) as bar:
        bar_id = bar.add_task(f"sweep {sweep_id}", total=total, completed=before.trials_total)

        def tick() -> None:  # a store error here is the supervisor's to time and bound
            now = read_progress()
            bar.update(
                bar_id,
                completed=min(now.trials_total, total),
                description=_bar_label(sweep_id, now),
            )

        def event(line: str) -> None:
            bar.console.print(line, markup=False, highlight=False, soft_wrap=True)

        report = Supervisor(
            store, specs, trial_timeout_s=options.trial_timeout_for(runner), on_event=event
        ).run(tick)
        now = progress_now()
        bar.update(
            bar_id, completed=min(now.trials_total, total), description=_bar_label(sweep_id, now)
        )
    return _summary(sweep_id, before, now, report, wall_s=time.perf_counter() - start)


def _bar_label(sweep_id: int, now) -> str:
    """The progress bar's description: the sweep's tasks done of all (`now`: its progress)."""
    return f"sweep {sweep_id}: {now.tasks_done}/{now.tasks_total} tasks"


def _progress_readers(store, db_url: str, sweep_id: int):
    """(read, read through a store restart) of the sweep's progress (`db.repo.sweep_progress`);
    the supervisor bounds a longer outage."""

    def read_progress():
        with session_scope(store) as session:
            return repo.sweep_progress(session, sweep_id=sweep_id)

    def progress_now():
        return retry_store(read_progress, url=db_url, deadline_s=10.0)

    return read_progress, progress_now


def _summary(sweep_id: int, before, now, report, *, wall_s: float) -> SweepSummary:
    """The counts of the store before and after (`db.repo.SweepProgress`) and the
    supervisor's report, as a SweepSummary with its times."""
    # This command's own trials: another command on the same sweep stores trials meanwhile.
    run_now = report.trials_run + report.crashed + report.timeouts
    stored_now = now.trials_total - before.trials_total
    times = SweepTimes(
        trials_run=run_now,
        trials_pruned=report.trials_pruned,
        compile_s=report.compile_s,
        compile_wait_s=report.compile_wait_s,
        measure_s=report.measure_s,
        wall_s=wall_s,
    )
    return SweepSummary(
        sweep_id=sweep_id,
        tasks_done=now.tasks_done,
        tasks_failed=now.tasks_failed,
        tasks_total=now.tasks_total,
        trials_total=now.trials_total,
        trials_ok=now.trials_ok,
        trials_run_now=run_now,
        trials_reused=report.trials_reused,
        trials_by_others=max(0, stored_now - run_now - report.trials_reused),
        wall_s=wall_s,
        worker_failures=report.worker_failures,
        trials_crashed_now=report.crashed,
        trials_timed_out_now=report.timeouts,
        times=times,
    )


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

    def first_line(text: str | None) -> str:
        lines = (text or "").strip().splitlines()
        return lines[0][:300] if lines else "no error text"

    failed = Counter(
        (trial.status, first_line(trial.error))
        for trial in trials
        if trial.status != TrialStatus.OK
    )
    if failed:
        (status, error), n = failed.most_common(1)[0]
        return f"{n} of {len(trials)} trials {status}: {error}"
    errors = Counter(first_line(task.error) for task in tasks if task.state == "failed")
    if errors:
        error, n = errors.most_common(1)[0]
        return f"{n} of {len(tasks)} tasks failed: {error}"
    return f"no trial of {len(trials)} ok"


def summary_lines(summary: SweepSummary) -> list[str]:
    """The closing lines of a sweep run: tasks and trials, then where the time went
    (`tuner.run.sweep.format_sweep_times`) when it is known."""
    counts = "".join(
        f", {n} {what}"
        for n, what in (
            (summary.trials_crashed_now, "crashed"),
            (summary.trials_timed_out_now, "timed out"),
        )
        if n
    )
    elsewhere = "".join(
        f", {n} {what}"
        for n, what in (
            (summary.trials_reused, "reused from other sweeps"),
            (summary.trials_by_others, "run by other workers"),
        )
        if n
    )
    lines = [
        f"sweep {summary.sweep_id}: {summary.tasks_done}/{summary.tasks_total} tasks done, "
        f"{summary.tasks_failed} failed; {summary.trials_run_now} trials run now{elsewhere} "
        f"({summary.trials_total} stored, {summary.trials_ok} ok{counts}); "
        f"wall {summary.wall_s:.1f} s"
    ]
    if summary.times is not None:
        lines.append(format_sweep_times(summary.times))
    return lines


@dataclass(frozen=True)
class SweepTimes:
    """Where a sweep's time went, for the line `tuner sweep` prints at the end.

    Attributes:
        trials_run: trials measured on a device (or replayed) by this run.
        trials_pruned: trials recorded as out_of_resources by compile-for-target pruning,
            never launched.
        compile_s: seconds spent compiling in precompile pools (overlapped with measuring).
        compile_wait_s: seconds workers waited for a compile (not hidden by measuring).
        measure_s: seconds spent measuring (sum of the trials' measure_s).
        wall_s: wall-clock seconds of the sweep.
    """

    trials_run: int
    trials_pruned: int
    compile_s: float
    compile_wait_s: float
    measure_s: float
    wall_s: float


def format_sweep_times(times: SweepTimes) -> str:
    """The summary line of a sweep's time.

    Args:
        times: the totals.

    Returns:
        One line, e.g. `120 trials run, 14 pruned before launch; compile 80.0 s (4.1 s waited),
        measure 300.2 s; per trial run: compile 0.667 s, measure 2.502 s; wall 320.5 s`
        (per-trial figures only when trials ran).
    """
    per_trial = ""
    if times.trials_run:
        per_trial = (
            f"; per trial run: compile {times.compile_s / times.trials_run:.3f} s, "
            f"measure {times.measure_s / times.trials_run:.3f} s"
        )
    return (
        f"{times.trials_run} trials run, {times.trials_pruned} pruned before launch; "
        f"compile {times.compile_s:.1f} s ({times.compile_wait_s:.1f} s waited), "
        f"measure {times.measure_s:.1f} s{per_trial}; wall {times.wall_s:.1f} s"
    )


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
