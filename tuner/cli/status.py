"""`tuner status`: the store's sweeps, or one sweep's tasks."""

from __future__ import annotations

from typing import Annotated

import typer

from db import repo
from db.repo import session_scope
from tuner.cli.errors import fail
from tuner.cli.options import DbOpt
from tuner.cli.output import console, plain
from tuner.cli.store import open_db
from tuner.cli.tables import Column, print_table


def status(
    sweep: Annotated[int | None, typer.Option("--sweep", help="Show this sweep's tasks.")] = None,
    db: DbOpt = None,
) -> None:
    """Sweeps in the store with task and trial counts; with --sweep, that sweep's tasks."""

    _, store = open_db(db, must_exist=True, read_only=True)
    with session_scope(store) as session:
        sweeps = repo.list_sweeps(session)
        tasks = (
            repo.sweep_tasks(session, sweep_id=sweep)
            if sweep is not None and any(s.sweep_id == sweep for s in sweeps)
            else None
        )
    if sweep is not None and tasks is None:
        listed = ", ".join(str(s.sweep_id) for s in sweeps) or "none"
        raise fail(f"no sweep with id {sweep}; sweeps: {listed}")
    if tasks is None:
        if not sweeps:
            plain("no sweeps in the store yet (tuner sweep ...)")
            return
        _print_sweeps(sweeps)
        return
    _print_tasks(tasks, sweep)


def _print_sweeps(sweeps) -> None:
    """One row per sweep (`db.repo.SweepSummary`): its scope, task counts by state, trials ok."""
    columns = [
        Column("sweep"),
        Column("device", text=True),
        Column("model", text=True),
        Column("TP"),
        Column("strategy", text=True),
        Column("tasks done"),
        Column("running", optional=True),
        Column("pending", optional=True),
        Column("failed"),
        Column("trials ok/total"),
    ]
    rows = [
        [
            str(s.sweep_id),
            s.device_name,
            s.model,
            str(s.tp),
            s.strategy,
            f"{s.tasks['done']}/{sum(s.tasks.values())}",
            str(s.tasks["running"]),
            str(s.tasks["pending"]),
            str(s.tasks["failed"]),
            f"{s.trials_ok}/{s.trials_total}",
        ]
        for s in sweeps
    ]
    print_table(console, columns, rows, title="sweeps")


def _print_tasks(tasks, sweep: int | None) -> None:
    """One row per task of a sweep (`db.repo.TaskSummary`): its state, trials, search timings."""
    columns = [
        Column("N"),
        Column("K"),
        Column("M"),
        Column("state", text=True),
        Column("attempts", optional=True),
        Column("trials ok/total"),
        Column("best_us"),
        Column("default_us"),
        Column("speedup"),
        Column("worker", text=True, optional=True),
        Column("error", text=True),
    ]
    rows = []
    for t in tasks:
        speedup = (
            f"{t.default_latency_us / t.best_latency_us:.2f}x"
            if t.best_latency_us and t.default_latency_us
            else "-"
        )
        rows.append(
            [
                str(t.N),
                str(t.K),
                str(t.M),
                t.state,
                str(t.attempts),
                f"{t.trials_ok}/{t.trials_total}",
                "-" if t.best_latency_us is None else f"{t.best_latency_us:.1f}",
                "-" if t.default_latency_us is None else f"{t.default_latency_us:.1f}",
                speedup,
                t.worker_id or "-",
                (t.error or "")[:60],
            ]
        )
    print_table(
        console,
        columns,
        rows,
        title=f"sweep {sweep}",
        caption="timings of the search; `tuner winners` shows the re-timed winners",
    )
