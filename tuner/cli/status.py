"""`tuner status`: the store's sweeps, or one sweep's tasks."""

from __future__ import annotations

from typing import Annotated

import typer

from db.repo import list_sweeps, session_scope, sweep_tasks
from tuner.cli.errors import fail
from tuner.cli.options import DbOpt
from tuner.cli.output import console, plain
from tuner.cli.store import open_db
from tuner.cli.tables import Column, print_table


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def status(
    sweep: Annotated[int | None, typer.Option("--sweep", help="Show this sweep's tasks.")] = None,
    db: DbOpt = None,
) -> None:
    """Sweeps in the store with task and trial counts; with --sweep, that sweep's tasks."""
    _, store = open_db(db, must_exist=True)
    with session_scope(store) as session:
        sweeps = list_sweeps(session)
        tasks = [] if sweep is None else sweep_tasks(session, sweep_id=sweep)
    if sweep is not None and sweep not in {s.sweep_id for s in sweeps}:
        listed = ", ".join(str(s.sweep_id) for s in sweeps) or "none"
        raise fail(f"no sweep with id {sweep}; sweeps: {listed}")
    if sweep is not None:
        _print_tasks(tasks, sweep)
    elif sweeps:
        _print_sweeps(sweeps)
    else:
        plain("no sweeps in the store yet (tuner sweep ...)")


def _print_sweeps(sweeps) -> None:
    """One row per sweep (`db.work.SweepInfo`): its scope, task counts by state, trials ok."""
    columns = [Column("sweep"), Column("device", text=True), Column("model", text=True)]
    columns += [Column("TP"), Column("strategy", text=True), Column("tasks done")]
    columns += [Column("running", optional=True), Column("pending", optional=True)]
    columns += [Column("failed"), Column("trials ok/total")]
    rows = [
        [str(s.sweep_id), s.device_name, s.model, str(s.tp), s.strategy]
        + [f"{s.tasks_done}/{s.tasks_total}", str(s.tasks_running), str(s.tasks_pending)]
        + [str(s.tasks_failed), f"{s.trials_ok}/{s.trials_total}"]
        for s in sweeps
    ]
    print_table(console, columns, rows, title="sweeps")


def _print_tasks(tasks, sweep: int) -> None:
    """One row per task of a sweep (`db.views.sweep_tasks`): its state, trials, search timings."""
    columns = [Column("N"), Column("K"), Column("M"), Column("state", text=True)]
    columns += [Column("attempts", optional=True), Column("trials ok/total")]
    columns += [Column("best_us"), Column("default_us"), Column("speedup")]
    columns += [Column("worker", text=True, optional=True), Column("error", text=True)]
    rows = []
    for t in tasks:
        best, default = t.best_latency_us, t.default_latency_us
        speedup = f"{default / best:.2f}x" if best and default else "-"
        rows.append(
            [str(t.N), str(t.K), str(t.M), t.state, str(t.attempts)]
            + [f"{t.trials_ok}/{t.trials_total}", _us(best), _us(default), speedup]
            + [t.worker_id or "-", (t.error or "")[:60]]
        )
    print_table(
        console,
        columns,
        rows,
        title=f"sweep {sweep}",
        caption="timings of the search; `tuner winners` shows the re-timed winners",
    )
