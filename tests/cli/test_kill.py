"""Killing a running sweep: workers never outlive it, finished trials stay, a re-run completes."""

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

SWEEP = [
    "sweep",
    "--device",
    "interpreter",
    "--model",
    "tiny",
    "--m",
    "3,5,7,9,11,13",
    "--trials",
    "3",
    "--interpreter-reps",
    "3",
]
TASKS, TRIALS = 12, 36  # 2 shapes x 6 M; 3 trials each


def children(pid):
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(child) for child in path.read_text().split()] if path.exists() else []


def alive(pid):
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "State:\tZ" not in status


def count(db, query):
    try:
        with sqlite3.connect(db) as connection:
            return connection.execute(query).fetchone()[0]
    except sqlite3.OperationalError:  # the sweep is still creating the tables
        return 0


def stored_trials(db):
    """Trials in the store; 0 while the store or its schema is still being created."""
    try:
        return count(db, "SELECT count(*) FROM trials") if db.exists() else 0
    except sqlite3.OperationalError:  # no such table yet, or locked by the schema's creation
        return 0


def wait_for(predicate, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_killed_sweep_leaves_no_worker_and_resumes(tmp_path, sig):
    db = tmp_path / "tuner.db"
    command = [sys.executable, "-m", "tuner.cli", *SWEEP, "--db", f"sqlite:///{db}"]
    sweep = subprocess.Popen(
        command, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    wait_for(lambda: stored_trials(db) >= 2, 120, "no trial stored")
    workers = children(sweep.pid)
    assert workers, "the sweep has no worker process"
    os.kill(sweep.pid, sig)
    sweep.wait(30)
    if sig == signal.SIGTERM:
        assert sweep.returncode == 143  # 128 + SIGTERM, as a shell reports it
        assert sweep.stderr.read().splitlines()[-1] == (
            "error: terminated (SIGTERM); finished trials are stored: run the same command to "
            "resume"
        )
    wait_for(lambda: not any(alive(pid) for pid in workers), 8, "a worker outlived the sweep")
    assert count(db, "SELECT count(*) FROM tasks WHERE state = 'running'") == 0
    stored = count(db, "SELECT count(*) FROM trials")
    assert stored < TRIALS  # the sweep was cut short, not finished by an orphan
    time.sleep(2)
    assert count(db, "SELECT count(*) FROM trials") == stored  # nobody measures any more

    again = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    assert count(db, "SELECT count(*) FROM tasks WHERE state = 'done'") == TASKS
    assert count(db, "SELECT count(*) FROM trials") == TRIALS  # none lost or repeated
    run_now = int(" ".join(again.stdout.split()).split(" trials run now")[0].split()[-1])
    assert run_now == TRIALS - stored
