"""Kill anywhere, lose nothing: SIGKILL the sweep (20 times) or its worker mid-run, on the replay
backend, then compare every trial and the winners with an uninterrupted run."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.cli.robust import (
    alive,
    children,
    count,
    lost_measurements,
    measure_log,
    remeasured_after_done,
    run_tuner,
    sweep_args,
    trial_rows,
    tuner_command,
    tuner_env,
    wait_for,
    winners,
    write_landscape,
)

M_VALUES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)
TASKS = 2 * len(M_VALUES)
# Per task, vLLM's default included. At about 0.5 ms of CPU a trial, each kill lets 5-15 trials
# through: 8 a task (256 in all) let 20 kills finish the sweep now and then.
TRIALS = 16
SWEEP_KILLS = 20
WORKER_KILLS = 8
LEASE_S = "3"


def kill_args(folder: Path, db: Path) -> list[str]:
    m = ",".join(map(str, M_VALUES))
    return sweep_args(folder, f"sqlite:///{db}", m, "--trials", str(TRIALS), strategy="optuna")


@pytest.fixture(scope="module")
def landscape(tmp_path_factory):
    folder = tmp_path_factory.mktemp("landscape")
    write_landscape(folder, M_VALUES)
    return folder


@pytest.fixture(scope="module")
def uninterrupted(landscape, tmp_path_factory):
    """Rows and winners of the same sweep run once without interruption."""
    db = tmp_path_factory.mktemp("reference") / "tuner.db"
    run = run_tuner(*kill_args(landscape, db), cwd=db.parent)
    assert run.returncode == 0, run.stderr
    rows = trial_rows(db)
    assert len(rows) == TASKS * TRIALS
    return rows, winners(f"sqlite:///{db}")


def new_trials_then(db: Path, process: subprocess.Popen, after: int, pause_s: float) -> bool:
    """Wait until `after` more trials are stored (or the process ended), then `pause_s`; with
    `after` 0 (a kill while the sweep starts), at most until its first new trial is stored.

    Returns:
        True when the process is still running.
    """
    base = count(db, "SELECT count(*) FROM trials")
    deadline = time.monotonic() + 60
    while count(db, "SELECT count(*) FROM trials") < base + after and process.poll() is None:
        assert time.monotonic() < deadline, "no progress for 60 s"
        time.sleep(0.005)
    if after == 0:
        deadline = time.monotonic() + pause_s
        while (
            time.monotonic() < deadline
            and process.poll() is None
            and count(db, "SELECT count(*) FROM trials") == base
        ):
            time.sleep(0.005)
    else:
        time.sleep(pause_s)
    return process.poll() is None


def check_against(db: Path, log_path: Path, deaths: int, uninterrupted) -> None:
    rows, best = uninterrupted
    assert count(db, "SELECT count(*) FROM tasks WHERE state = 'done'") == TASKS
    assert count(db, "SELECT count(*) FROM trials WHERE status IN ('crashed', 'timeout')") == 0
    assert trial_rows(db) == rows  # no trial lost, none stored twice, same values
    assert winners(f"sqlite:///{db}") == best
    log = measure_log(log_path)
    assert remeasured_after_done(log) == []  # no finished trial measured twice
    lost = lost_measurements(log)
    assert lost <= deaths
    done = [(task_id, label) for _, event, task_id, label in log if event == "done"]
    assert len(done) == len(set(done))
    # A kill between a trial's commit and its "done" line (microseconds, but with trials at
    # 0.5 ms of CPU a kill lands there now and then) stores the trial without the line.
    assert TASKS * TRIALS - deaths <= len(done) <= TASKS * TRIALS
    print(
        f"deaths {deaths}: trials {len(rows)}, lost in flight and re-measured {lost}, "
        "stored twice 0"
    )


def test_sweep_killed_20_times_resumes_to_the_same_trials_and_winners(
    landscape, uninterrupted, tmp_path
):
    seed = 20261201
    rng = random.Random(seed)
    db, log_path = tmp_path / "tuner.db", tmp_path / "measured.log"
    env = tuner_env(TUNER_LEASE_S=LEASE_S, TUNER_TEST_MEASURE_LOG=str(log_path))
    command = tuner_command(*kill_args(landscape, db))
    kills = []
    while len(kills) < SWEEP_KILLS:
        # a few trials into the run (0: while it starts), then a random fraction of a trial
        after, pause_s = rng.choice([0, 1, 1, 2, 3, 4]), rng.uniform(0.0, 0.03)
        if after == 0:
            pause_s = rng.uniform(0.1, 1.0)
        sweep = subprocess.Popen(
            command, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        running = new_trials_then(db, sweep, after, pause_s)
        if not running:
            break
        os.kill(sweep.pid, signal.SIGKILL)
        sweep.wait(10)
        kills.append((after, round(pause_s, 3), count(db, "SELECT count(*) FROM trials")))
    print(f"seed {seed}: {len(kills)} sweep kills (new trials, pause s, trials stored): {kills}")
    assert len(kills) == SWEEP_KILLS, "the sweep finished before all kills: shorten them"
    last = run_tuner(
        *kill_args(landscape, db),
        cwd=tmp_path,
        TUNER_LEASE_S=LEASE_S,
        TUNER_TEST_MEASURE_LOG=str(log_path),
    )
    assert last.returncode == 0, last.stderr
    check_against(db, log_path, len(kills), uninterrupted)


def worker_of(sweep_pid: int) -> int | None:
    for pid in children(sweep_pid):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if b"spawn_main" in cmdline and alive(pid):
            return pid
    return None


def test_worker_killed_while_the_sweep_runs_is_restarted_and_loses_nothing(
    landscape, uninterrupted, tmp_path
):
    seed = 8
    rng = random.Random(seed)
    db, log_path = tmp_path / "tuner.db", tmp_path / "measured.log"
    env = tuner_env(TUNER_LEASE_S=LEASE_S, TUNER_TEST_MEASURE_LOG=str(log_path))
    sweep = subprocess.Popen(
        tuner_command(*kill_args(landscape, db)),
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    kills = []
    try:
        for _ in range(WORKER_KILLS):
            wait_for(
                lambda: worker_of(sweep.pid) is not None or sweep.poll() is not None,
                30,
                "no worker process",
            )
            after, pause_s = rng.randint(1, 4), rng.uniform(0.0, 0.03)
            if not new_trials_then(db, sweep, after, pause_s):
                break
            pid = worker_of(sweep.pid)
            os.kill(pid, signal.SIGKILL)
            kills.append((after, round(pause_s, 3), pid))
            wait_for(
                lambda pid=pid: worker_of(sweep.pid) not in (None, pid) or sweep.poll() is not None,
                30,
                "the worker was not restarted",
            )
        out, err = sweep.communicate(timeout=120)
    finally:
        sweep.kill()
    print(f"seed {seed}: {len(kills)} worker kills (new trials, pause s, pid): {kills}")
    assert len(kills) == WORKER_KILLS
    assert sweep.returncode == 0, err
    assert out.count("killed by SIGKILL; its task goes back to the queue") == WORKER_KILLS
    check_against(db, log_path, len(kills), uninterrupted)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_killed_sweep_leaves_no_worker_and_resumes(landscape, uninterrupted, tmp_path, sig):
    db = tmp_path / "tuner.db"
    # Replayed trials of 50 ms: the kill lands mid-sweep.
    env = tuner_env(TUNER_LEASE_S=LEASE_S, TUNER_TEST_TRIAL_SLEEP_S="0.05")
    sweep = subprocess.Popen(
        tuner_command(*kill_args(landscape, db)),
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(lambda: count(db, "SELECT count(*) FROM trials") >= 2, 60, "no trial stored")
    workers = children(sweep.pid)
    assert workers, "the sweep has no worker process"
    os.kill(sweep.pid, sig)
    sweep.wait(30)
    assert sweep.stderr is not None
    if sig == signal.SIGTERM:
        assert sweep.returncode == 143  # 128 + SIGTERM, as a shell reports it
        assert sweep.stderr.read().splitlines()[-1] == (
            "error: terminated (SIGTERM); finished trials are stored: run the same command to "
            "resume"
        )
        assert count(db, "SELECT count(*) FROM tasks WHERE state = 'running'") == 0
    wait_for(lambda: not any(alive(pid) for pid in workers), 8, "a worker outlived the sweep")
    stored = count(db, "SELECT count(*) FROM trials")
    assert stored < TASKS * TRIALS  # cut short, not finished by an orphan
    time.sleep(1)
    assert count(db, "SELECT count(*) FROM trials") == stored  # nobody measures any more
    again = run_tuner(*kill_args(landscape, db), cwd=tmp_path, TUNER_LEASE_S=LEASE_S)
    assert again.returncode == 0, again.stderr
    run_now = int(" ".join(again.stdout.split()).split(" trials run now")[0].split()[-1])
    assert run_now == TASKS * TRIALS - stored  # none lost, none measured twice
    assert trial_rows(db) == uninterrupted[0]
