"""Crash isolation: a config that kills its worker is recorded as crashed, one that hangs as
timeout; the worker is restarted, the task goes on, the sweep ends normally. And a task leased
to a worker that died with its sweep is claimed again once the lease expires."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from tests.cli.robust import (
    CONFIGS,
    count,
    query,
    run_tuner,
    sweep_args,
    tuner_command,
    tuner_env,
    wait_for,
    write_landscape,
)
from tuner.kernels.dense.space import default_config
from tuner.run.supervisor import (
    EXIT_PARENT_GONE,
    EXIT_RESTART,
    blames_config,
    describe_exit,
)

DEFAULT = default_config()
SMALL = [DEFAULT, *[c for c in CONFIGS if c != DEFAULT][:5]]  # 6 configs, grid searches all
CRASHER = SMALL[2]


@pytest.fixture
def folder(tmp_path):
    write_landscape(tmp_path, (1, 16))
    (tmp_path / "small.json").write_text(json.dumps([c.as_dict() for c in SMALL]))
    return tmp_path


def grid_sweep(folder, m: str, *extra: str) -> list[str]:
    return sweep_args(folder, f"sqlite:///{folder / 'tuner.db'}", m, *extra, configs="small.json")


def statuses(folder) -> list[tuple]:
    """(M, config label, status, is_default, error) of every trial of shape (256, 384)."""
    rows = query(
        folder / "tuner.db",
        "SELECT t.M, r.BLOCK_SIZE_M, r.BLOCK_SIZE_N, r.GROUP_SIZE_M, r.num_warps, "
        "r.num_stages, r.status, r.is_default, r.error FROM trials r JOIN tasks t "
        "USING (task_id) WHERE t.N = 256 ORDER BY t.M, r.trial_id",
    )
    return [
        (m, f"{bm}x{bn}x128 g{g} w{w} s{s}", status, is_default, error)
        for m, bm, bn, g, w, s, status, is_default, error in rows
    ]


def test_exit_codes_that_blame_the_config():
    assert describe_exit(-signal.SIGABRT) == "killed by SIGABRT"
    assert describe_exit(-200) == "killed by signal 200"
    assert describe_exit(1) == "exited with code 1"
    assert describe_exit(EXIT_RESTART).startswith("exited after a crashed trial")
    assert [blames_config(code) for code in (-signal.SIGSEGV, -signal.SIGABRT, 1, 2)] == [True] * 4
    quiet = (0, 130, EXIT_PARENT_GONE, EXIT_RESTART)
    quiet += tuple(-sig for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP))
    assert [blames_config(code) for code in quiet] == [False] * len(quiet)


def test_crashing_configs_are_recorded_and_the_sweep_goes_on(folder):
    labels = f"{CRASHER.short()};{DEFAULT.short()}"
    run = run_tuner(*grid_sweep(folder, "16"), cwd=folder, TUNER_FAULT_CRASH=labels)
    assert run.returncode == 0, run.stderr
    assert "2/2 tasks done, 0 failed; 12 trials run now (12 stored, 8 ok, 4 crashed)" in (
        " ".join(run.stdout.split())
    )
    for n, k in ((256, 384), (576, 256)):
        lines = [
            f"worker cpu killed by SIGABRT while measuring {label} for N={n}, K={k}, "
            "M=16: recorded as crashed"
            for label in (DEFAULT.short(), CRASHER.short())
        ]
        assert all(line in run.stdout for line in lines), run.stdout
    error = "worker killed by SIGABRT while measuring this config"
    rows = statuses(folder)
    assert [label for _, label, *_ in rows] == [c.short() for c in SMALL]  # all, in order
    for _, label, status, is_default, text in rows:
        crashed = label in (DEFAULT.short(), CRASHER.short())
        assert (status, text) == (("crashed", error) if crashed else ("ok", None)), label
        assert is_default == (label == DEFAULT.short())
    assert count(folder / "tuner.db", "SELECT count(*) FROM tasks WHERE state = 'done'") == 2


def test_a_hanging_config_times_out_and_the_sweep_goes_on(folder):
    start = time.monotonic()
    run = run_tuner(
        *grid_sweep(folder, "16", "--trial-timeout", "1.5"),
        cwd=folder,
        TUNER_FAULT_HANG=CRASHER.short(),
    )
    assert run.returncode == 0, run.stderr
    assert time.monotonic() - start > 2 * 1.5
    rows = statuses(folder)
    error = "no result after 1.5 s (trial timeout); worker killed"
    assert [(label, status, text) for _, label, status, _, text in rows] == [
        (c.short(), "timeout", error) if c == CRASHER else (c.short(), "ok", None) for c in SMALL
    ]
    assert run.stdout.count(f"killed by SIGKILL while measuring {CRASHER.short()}") == 2
    assert count(folder / "tuner.db", "SELECT count(*) FROM tasks WHERE state = 'done'") == 2


def test_bad_trial_timeout_is_one_line(folder):
    run = run_tuner(*grid_sweep(folder, "16", "--trial-timeout", "0"), cwd=folder)
    assert run.returncode == 2
    assert "Invalid value for '--trial-timeout'" in run.stderr
    assert "Traceback" not in run.stderr


def test_task_of_a_dead_worker_is_claimed_again_when_its_lease_expires(folder):
    """SIGKILL the sweep and its worker together: nobody hands the task back."""
    db = folder / "tuner.db"
    # The worker hangs on the third config, so the first task is surely running when killed
    # (replayed trials take microseconds: without the hang the sweep could be over by then).
    sweep = subprocess.Popen(
        tuner_command(*grid_sweep(folder, "16")),
        cwd=folder,
        env=tuner_env(TUNER_LEASE_S="4", TUNER_FAULT_HANG=CRASHER.short()),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for(lambda: count(db, "SELECT count(*) FROM trials") >= 2, 60, "no trial stored")
    os.killpg(sweep.pid, signal.SIGKILL)
    sweep.wait(10)
    time.sleep(0.5)
    [(task_id, worker_id, expires)] = query(
        db, "SELECT task_id, worker_id, lease_expires_at FROM tasks WHERE state = 'running'"
    )
    again = run_tuner(*grid_sweep(folder, "16"), cwd=folder, TUNER_LEASE_S="4")
    assert again.returncode == 0, again.stderr
    [(state, attempts, new_worker, started)] = query(
        db, "SELECT state, attempts, worker_id, started_at FROM tasks WHERE task_id = ?", task_id
    )
    assert (state, attempts) == ("done", 2)
    assert new_worker != worker_id
    assert started >= expires  # not before the dead worker's lease ended
    assert count(db, "SELECT count(*) FROM trials") == 2 * len(SMALL)
