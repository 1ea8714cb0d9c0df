"""Store faults during a slow sweep: a PostgreSQL restart and a stop/start lose nothing and fail
nothing; a server that stays down, or a full SQLite store, stops the sweep with one line and
exit 2, and re-running the same command resumes to the rows of an uninterrupted run.

The PostgreSQL cases drive a private server of their own (tests/pgserver.py; skipped where no
PostgreSQL binaries are installed), never the shared one.

Many writers: `tuner sweep --no-run`, then four `tuner worker` processes on one store (a
SQLite file, PostgreSQL): every task done once, by one worker, with the trials and
winners of a single-worker run, and no "database is locked".
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections import defaultdict

import pytest
from sqlalchemy import make_url

from tests.cli.common import query
from tests.cli.robust import (
    CONFIGS,
    TRIAL_ROWS,
    measure_log,
    remeasured_after_done,
    run_tuner,
    start_tuner,
    store_rows,
    sweep_args,
    trial_rows,
    wait_for,
    winners,
    write_landscape,
)
from tests.pgserver import PrivatePostgres
from tests.storefill import reset_postgresql
from tuner.kernels.dense.space import default_config

DEFAULT = default_config()
SMALL = [DEFAULT, *[c for c in CONFIGS if c != DEFAULT][:4]]  # 5 configs, grid searches all
M = "1,16"
TASKS, TRIALS = 4, 4 * len(SMALL)
SLOW = "0.25"  # seconds per trial: the fault lands inside one

needs_pg = pytest.mark.skipif(
    not PrivatePostgres.available(),
    reason="no PostgreSQL binaries (initdb, pg_ctl) to run a server",
)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("storefaults")
    write_landscape(folder, (1, 16))
    (folder / "small.json").write_text(json.dumps([c.as_dict() for c in SMALL]))
    return folder


def store_args(folder, url: str, configs: str = "small.json") -> list[str]:
    return sweep_args(folder, url, M, "--no-publish", configs=configs)


ROWS = {
    "trials": TRIAL_ROWS,
    "decisions": 'SELECT t."N", t."K", t."M", count(d.task_id) FROM tasks t LEFT JOIN '
    'decisions d ON d.task_id = t.task_id GROUP BY t."N", t."K", t."M"',
    "states": "SELECT state, count(*) FROM tasks GROUP BY state",
}


def all_rows(url: str) -> dict[str, list]:
    """Trials, decisions per task and task states, sorted."""
    return {name: store_rows(url, sql) for name, sql in ROWS.items()}


@pytest.fixture(scope="module")
def reference(folder):
    """The rows of one uninterrupted run (SQLite; replayed latencies are the same anywhere)."""
    url = f"sqlite:///{folder / 'reference.db'}"
    run_tuner(*store_args(folder, url), cwd=folder)
    rows = all_rows(url)
    assert len(rows["trials"]) == TRIALS and rows["states"] == [("done", TASKS)]
    assert [n for *_, n in rows["decisions"]] == [1] * TASKS
    return rows


@pytest.fixture
def server():
    pg = PrivatePostgres().init()  # under /tmp: pytest's folders are closed to postgres
    try:
        yield pg
    finally:
        pg.destroy()


def start_slow_sweep(folder, url: str, log, **env: str) -> subprocess.Popen:
    slow = {"TUNER_TEST_TRIAL_SLEEP_S": SLOW, "TUNER_TEST_MEASURE_LOG": str(log)}
    return start_tuner(*store_args(folder, url), cwd=folder, **slow, **env)


def wait_inside_a_trial(log, started: int) -> None:
    """Until the `started`-th measurement began, then a little into it."""
    wait_for(
        lambda: sum(e == "start" for _, e, _, _ in measure_log(log)) >= started,
        60,
        "the sweep never got that far",
    )
    time.sleep(0.1)


@needs_pg
@pytest.mark.parametrize("fault", ["restart", "stop-start"])
def test_postgres_restart_or_stop_during_a_trial_loses_and_fails_nothing(
    folder, reference, server, tmp_path, fault
):
    log = tmp_path / "measure.log"
    sweep = start_slow_sweep(folder, server.url, log)
    wait_inside_a_trial(log, 5)
    if fault == "restart":
        server.restart()
    else:
        server.stop()
        time.sleep(2.0)  # down across the end of the trial in flight: its record waits
        server.start()
    out, err = sweep.communicate(timeout=120)
    assert sweep.returncode == 0, err
    assert "Traceback" not in err + out
    assert f"{TASKS}/{TASKS} tasks done, 0 failed" in " ".join(out.split())
    assert all_rows(server.url) == reference


@needs_pg
def test_postgres_that_stays_down_stops_the_sweep_in_one_line_and_resumes(
    folder, reference, server, tmp_path
):
    log = tmp_path / "measure.log"
    sweep = start_slow_sweep(folder, server.url, log, TUNER_STORE_TIMEOUT_S="3", TUNER_LEASE_S="2")
    wait_inside_a_trial(log, 5)
    server.stop()
    began = time.monotonic()
    _out, err = sweep.communicate(timeout=120)
    stopped_s = time.monotonic() - began
    assert sweep.returncode == 2, err
    assert stopped_s < 30  # 3 s of retries, the stop, and the hand-back try
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in err
    assert f"127.0.0.1:{server.port}" in errors[0] and "run the same command" in errors[0]
    server.start()
    states = dict(all_rows(server.url)["states"])
    assert states.get("failed", 0) == 0
    time.sleep(2.5)  # the leases the stopped sweep could not hand back end
    run_tuner(*store_args(folder, server.url), cwd=folder, TUNER_LEASE_S="2")
    assert all_rows(server.url) == reference


def test_full_sqlite_store_stops_with_one_line_and_resumes_once_there_is_room(folder, tmp_path):
    """SQLite's page limit (PRAGMA max_page_count at the size of the new store) as the full
    disk: the sweep stops naming the disk, nothing is failed, and the same command resumes
    once the limit is lifted. A grid of all 96 configs: the trials outgrow the first pages."""
    ref_url = f"sqlite:///{tmp_path / 'reference.db'}"
    run_tuner(*store_args(folder, ref_url, "configs.json"), cwd=folder)
    reference = all_rows(ref_url)
    assert reference["states"] == [("done", TASKS)]
    db = tmp_path / "full.db"
    url = f"sqlite:///{db}"
    args = store_args(folder, url, "configs.json")
    run_tuner(*args, "--no-run", cwd=folder)
    [(pages,)] = query(db, "PRAGMA page_count")
    full = run_tuner(
        *args, cwd=folder, TUNER_STORE_TIMEOUT_S="2", TUNER_TEST_SQLITE_MAX_PAGES=str(pages), code=2
    )
    errors = [line for line in full.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in full.stderr, full.stderr
    assert errors[0].startswith(f"error: disk full at {tmp_path}: ")
    assert errors[0].endswith("free space and run the same command")
    rows = all_rows(url)
    assert 0 < len(rows["trials"]) < len(reference["trials"])
    assert dict(rows["states"]).get("failed", 0) == 0
    assert dict(rows["states"]).get("running", 0) == 0  # handed back
    run_tuner(*args, cwd=folder)
    assert all_rows(url) == reference


WRITER_M = (1, 2, 4, 8, 16, 32, 64, 128)
WRITER_TASKS = 2 * len(WRITER_M)
WRITER_TRIALS = 8
PG_URL = os.environ.get("TUNER_TEST_PG_URL")


def writer_sweep(folder, url: str) -> list[str]:
    m, trials = ",".join(map(str, WRITER_M)), str(WRITER_TRIALS)
    return sweep_args(folder, url, m, "--trials", trials, configs="configs8.json")


@pytest.fixture(scope="module")
def writers(tmp_path_factory):
    """The landscape folder, and the trials and winners of one uninterrupted single worker."""
    folder = tmp_path_factory.mktemp("writers")
    write_landscape(folder, WRITER_M)
    # A grid over WRITER_TRIALS configs: concurrent workers warm-start each task from whatever the
    # store knows when they claim it, so only an exhaustive search measures the same trials
    # as a single worker whatever the order.
    chosen = [*CONFIGS[: WRITER_TRIALS - 1], default_config()]
    assert len(set(chosen)) == WRITER_TRIALS
    (folder / "configs8.json").write_text(json.dumps([c.as_dict() for c in chosen]))
    db = folder / "reference.db"
    run_tuner(*writer_sweep(folder, f"sqlite:///{db}"), cwd=folder)
    return folder, trial_rows(f"sqlite:///{db}"), winners(f"sqlite:///{db}")


def run_workers(folder, url: str, workers: int, *scope: str, sweeps: int = 0):
    """Create the sweep with --no-run, then run `workers` `tuner worker` processes at once,
    the first `sweeps` of them as the same `tuner sweep` command; return the measure log and
    the trials each sweep said it ran now."""
    sweep = writer_sweep(folder, url)
    created = run_tuner(*sweep, "--no-run", cwd=folder)
    assert "grid, no run" in created.stdout
    log_path = folder / f"measured-{make_url(url).get_backend_name()}.log"  # one per store
    # Replayed trials take well under a millisecond: 50 ms each keeps a worker busy long
    # enough (16 tasks x 8 trials, about 6 s alone) for the others to start and claim tasks.
    env = {"TUNER_LEASE_S": "4", "TUNER_TEST_MEASURE_LOG": str(log_path)}
    # What `tuner worker` shares with the `tuner sweep` whose tasks it joins.
    replay = f"--configs {folder / 'configs8.json'} --replay {folder / 'l20.json'}"
    worker = ["worker", *scope, "--device", "L20", *replay.split(), "--db", url]
    processes = [
        start_tuner(
            *([*sweep, "--no-publish"] if index < sweeps else worker),
            cwd=folder,
            TUNER_TEST_TRIAL_SLEEP_S="0.05",
            **env,
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
    assert len(pids_of_task) == WRITER_TASKS
    assert all(len(pids) == 1 for pids in pids_of_task.values())
    starts = [(task_id, label) for _, event, task_id, label in log if event == "start"]
    assert len(starts) == len(set(starts)) == WRITER_TASKS * WRITER_TRIALS
    assert len({pid for pids in pids_of_task.values() for pid in pids}) >= 2  # workers took part


def test_two_sweeps_and_two_workers_on_one_sqlite_file(writers):
    folder, rows, best = writers
    db = folder / "shared.db"
    log, run_now = run_workers(folder, f"sqlite:///{db}", 4, "--sweep", "1", sweeps=2)
    check_log(log)
    # Each sweep counts only its own workers' trials as run now, not the others'.
    assert sum(run_now) <= WRITER_TASKS * WRITER_TRIALS, run_now
    assert trial_rows(f"sqlite:///{db}") == rows
    assert winners(f"sqlite:///{db}") == best


@pytest.mark.skipif(
    not PG_URL,
    reason="TUNER_TEST_PG_URL is not set (a scratch PostgreSQL database, as .ci/run sets up)",
)
def test_four_workers_on_postgresql(writers):
    folder, rows, best = writers
    reset_postgresql(PG_URL)
    log, _ = run_workers(folder, PG_URL, 4)  # no --sweep: every sweep on the device
    check_log(log)
    # every task claimed and done exactly once
    assert store_rows(PG_URL, "SELECT state, attempts FROM tasks") == [("done", 1)] * WRITER_TASKS
    assert trial_rows(PG_URL) == rows
    assert winners(PG_URL) == best
