"""Many writers: `tuner sweep --no-run`, then several `tuner worker` processes on one store (4 on
a SQLite file, 8 on PostgreSQL): every task done once, by one worker, with the trials and
winners of a single-worker run, and no "database is locked"."""

from __future__ import annotations

import json
import os
import subprocess
from collections import defaultdict

import pytest
from sqlalchemy import select, text

from tests.cli.robust import (
    CONFIGS,
    measure_log,
    remeasured_after_done,
    run_tuner,
    trial_rows,
    tuner_command,
    tuner_env,
    winners,
    write_landscape,
)
from tuner.kernels.dense.space import default_config

M_VALUES = (1, 2, 3, 4, 8, 12, 16, 24, 32, 48, 64, 128)
TASKS = 2 * len(M_VALUES)
TRIALS = 8
PG_URL = os.environ.get("TUNER_TEST_PG_URL")


def sweep_args(folder, url: str) -> list[str]:
    return [
        "--device",
        "L20",
        "--configs",
        str(folder / "configs8.json"),
        "--replay",
        str(folder / "l20.json"),
        "--db",
        url,
    ]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The landscape folder, and the trials and winners of one uninterrupted single worker."""
    folder = tmp_path_factory.mktemp("writers")
    write_landscape(folder, M_VALUES)
    # A grid over TRIALS configs: concurrent workers warm-start each task from whatever the
    # store knows when they claim it, so only an exhaustive search measures the same trials
    # as a single worker whatever the order.
    chosen = [*CONFIGS[: TRIALS - 1], default_config()]
    assert len(set(chosen)) == TRIALS
    (folder / "configs8.json").write_text(json.dumps([c.as_dict() for c in chosen]))
    db = folder / "reference.db"
    run = run_tuner(
        "sweep",
        "--model",
        "tiny",
        "--m",
        ",".join(map(str, M_VALUES)),
        "--strategy",
        "grid",
        "--trials",
        str(TRIALS),
        *sweep_args(folder, f"sqlite:///{db}"),
        cwd=folder,
    )
    assert run.returncode == 0, run.stderr
    return folder, trial_rows(db), winners(f"sqlite:///{db}")


def run_workers(folder, url: str, workers: int, *scope: str, sweeps: int = 0):
    """Create the sweep with --no-run, then run `workers` `tuner worker` processes at once,
    the first `sweeps` of them as the same `tuner sweep` command; return the measure log and
    the trials each sweep said it ran now."""
    sweep = ["sweep", "--model", "tiny", "--m", ",".join(map(str, M_VALUES)), "--strategy"]
    sweep += ["grid", "--trials", str(TRIALS), *sweep_args(folder, url)]
    created = run_tuner(*sweep, "--no-run", cwd=folder)
    assert created.returncode == 0, created.stderr
    assert "grid, no run" in created.stdout
    log_path = folder / f"measured-{workers}.log"
    # Replayed trials take well under a millisecond: 50 ms each keeps a worker busy long
    # enough (24 tasks x 8 trials, about 10 s alone) for the others to start and claim tasks.
    env = tuner_env(
        TUNER_LEASE_S="4", TUNER_TEST_MEASURE_LOG=str(log_path), TUNER_TEST_TRIAL_SLEEP_S="0.05"
    )
    processes = [
        subprocess.Popen(
            tuner_command(*sweep, "--no-publish")
            if index < sweeps
            else tuner_command("worker", *scope, *sweep_args(folder, url)),
            cwd=folder,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for index in range(workers)
    ]
    results = [(p.communicate(timeout=240), p.returncode) for p in processes]
    for index, ((out, err), code) in enumerate(results):
        assert code == 0, err
        assert "locked" not in out + err and "Traceback" not in err
        assert index < sweeps or "worker done: 0 unfinished task(s) left" in out
    run_now = [
        int(" ".join(out.split()).split(" trials run now")[0].split()[-1])
        for (out, _), _ in results[:sweeps]
    ]
    return measure_log(log_path), run_now


def check_log(log) -> None:
    """Each task measured by one process, no config of it twice."""
    assert remeasured_after_done(log) == []
    pids_of_task = defaultdict(set)
    for pid, _event, task_id, _label in log:
        pids_of_task[task_id].add(pid)
    assert len(pids_of_task) == TASKS
    assert all(len(pids) == 1 for pids in pids_of_task.values())
    starts = [(task_id, label) for _, event, task_id, label in log if event == "start"]
    assert len(starts) == len(set(starts)) == TASKS * TRIALS
    workers = {pid for pids in pids_of_task.values() for pid in pids}
    print(f"{len(workers)} workers took part, {len(starts)} trials, each measured once")
    assert len(workers) >= 2


def test_two_sweeps_and_two_workers_on_one_sqlite_file(reference):
    folder, rows, best = reference
    db = folder / "shared.db"
    log, run_now = run_workers(folder, f"sqlite:///{db}", 4, "--sweep", "1", sweeps=2)
    check_log(log)
    # Each sweep counts only its own workers' trials as run now, not the others'.
    assert sum(run_now) <= TASKS * TRIALS, run_now
    assert trial_rows(db) == rows
    assert winners(f"sqlite:///{db}") == best


def reset_postgresql(url: str) -> None:
    from db.connection import connect
    from db.models import Base

    engine = connect(url)
    try:
        with engine.begin() as connection:
            Base.metadata.drop_all(connection)
            connection.execute(text("DROP TABLE IF EXISTS alembic_version"))
    finally:
        engine.dispose()


@pytest.mark.skipif(
    not PG_URL,
    reason="TUNER_TEST_PG_URL is not set (a scratch PostgreSQL database, as .ci/run sets up)",
)
def test_eight_workers_on_postgresql(reference):
    folder, rows, best = reference
    reset_postgresql(PG_URL)
    log, _ = run_workers(folder, PG_URL, 8)  # no --sweep: every sweep on the device
    check_log(log)
    from db.connection import connect
    from db.models import Task, Trial
    from tuner.core import CONFIG_KEYS

    engine = connect(PG_URL)
    try:
        with engine.connect() as connection:
            tasks = connection.execute(select(Task.state, Task.attempts)).all()
            stored = connection.execute(
                select(
                    Task.N,
                    Task.K,
                    Task.M,
                    *(getattr(Trial, c) for c in CONFIG_KEYS),
                    Trial.status,
                    Trial.latency_us,
                    Trial.is_default,
                ).join(Task, Trial.task_id == Task.task_id)
            ).all()
    finally:
        engine.dispose()
    assert sorted(tasks) == [("done", 1)] * TASKS  # every task claimed and done exactly once
    assert sorted((*r[:-1], int(r[-1])) for r in stored) == rows
    assert winners(PG_URL) == best
