"""Sweep orchestration: start one worker per device for a planned sweep, show progress, and
say how it went."""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Sequence
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
from tuner.run.plan import SweepRequest
from tuner.run.supervisor import Supervisor, first_line
from tuner.run.worker import WorkerSpec

if TYPE_CHECKING:
    from tuner.measure.runner import Runner

# Seconds one config may take before its worker is killed (--trial-timeout), per runner;
# TRIAL_TIMEOUT_S_GPU for a GPU.
TRIAL_TIMEOUT_S = {"interpreter": 1800.0, "replay": 60.0}
TRIAL_TIMEOUT_S_GPU = 300.0


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


def supervisor(
    store,
    db_url: str,
    *,
    runner: Runner,
    visible_devices: Sequence[str | None],
    configs: Sequence[KernelConfig] | None,
    kernel: str = "builtin",
    trial_timeout_s: float | None = None,
    on_event=print,
    **scope,
) -> Supervisor:
    """The `Supervisor` of one worker per visible device (CUDA_VISIBLE_DEVICES values, None:
    one CPU worker), measuring with `runner` the candidates `configs` (None: the sweep's
    space) of `kernel` ("builtin" or "vllm"), killing a config after `trial_timeout_s` (None:
    the runner's `TRIAL_TIMEOUT_S`), claiming tasks in `scope` (sweep_id, and optionally
    device_name and space, as `WorkerSpec` takes them).

    A GPU runner's workers get the CPU count less one per GPU, shared between them, as
    compile processes (at least one each).
    """
    gpus = max(1, len(visible_devices))
    compile_workers = max(1, ((os.cpu_count() or 2) - gpus) // gpus) if runner.on_gpu else 0
    specs = [
        WorkerSpec(
            db_url=db_url,
            worker_id="",
            runner=runner,
            visible_device=device,
            configs=None if configs is None else tuple(configs),
            kernel=kernel,
            compile_workers=compile_workers,
            **scope,
        )
        for device in visible_devices
    ]
    timeout_s = trial_timeout_s or TRIAL_TIMEOUT_S.get(runner.name, TRIAL_TIMEOUT_S_GPU)
    return Supervisor(store, specs, trial_timeout_s=timeout_s, on_event=on_event)


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
) -> tuple[repo.SweepInfo, list[str]]:
    """Run the planned sweep `sweep_id` of `request` in `store` (at `db_url`) with the workers
    of `supervisor`, drawing a progress bar on `console`; (the sweep's progress in the store
    now, the closing lines: `summary_lines`).

    Raises:
        KeyboardInterrupt: Ctrl-C or SIGTERM; the tasks were handed back.
        db.connection.StoreUnavailable: the store stayed unavailable past its deadline; the
            workers were stopped, their tasks handed back where the store allowed.
    """
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

        workers = supervisor(
            store,
            db_url,
            runner=runner,
            visible_devices=visible_devices,
            configs=request.configs,
            kernel=request.kernel,
            trial_timeout_s=trial_timeout_s,
            on_event=event,
            sweep_id=sweep_id,
        ).run(tick)
        now = retry_store(read_progress, url=db_url, deadline_s=10.0)
        tick(now)
    wall_s = time.perf_counter() - start
    return now, summary_lines(sweep_id, before, now, workers, wall_s)


def _progress(store, sweep_id: int) -> repo.SweepInfo:
    with session_scope(store) as session:
        (progress,) = repo.list_sweeps(session, sweep_id=sweep_id)
        return progress


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


def summary_lines(sweep_id: int, before, now, workers: Supervisor, wall_s: float) -> list[str]:
    """The closing lines of a sweep run: tasks and trials (this run's own: another command on
    the same sweep stores trials meanwhile, `before` and `now` its progress), then where the
    time went, e.g. `compile 80.0 s, measure 300.2 s, wall 320.5 s`."""
    reused = int(workers.total("trials_reused"))
    run_now = int(workers.total("trials_stored")) + workers.crashed + workers.timeouts
    by_others = now.trials_total - before.trials_total - run_now - reused
    counts = [(workers.crashed, "crashed"), (workers.timeouts, "timed out")]
    elsewhere = [(reused, "reused from other sweeps"), (max(0, by_others), "run by other workers")]
    compile_s, measure_s = workers.total("compile_s"), workers.total("measure_s")
    return [
        f"sweep {sweep_id}: {now.tasks_done}/{now.tasks_total} tasks done, "
        f"{now.tasks_failed} failed; {run_now} trials run now{_some(elsewhere)} "
        f"({now.trials_total} stored, {now.trials_ok} ok{_some(counts)})",
        f"compile {compile_s:.1f} s, measure {measure_s:.1f} s, wall {wall_s:.1f} s",
    ]


def _some(counts: list[tuple[int, str]]) -> str:
    """ ", 2 crashed, 1 timed out": the counts that are not 0."""
    return "".join(f", {n} {what}" for n, what in counts if n)
