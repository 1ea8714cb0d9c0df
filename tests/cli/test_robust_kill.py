"""Kill anywhere, lose nothing: SIGKILL the sweep (8 times) or its worker (4 times) mid-run, on
the replay backend, then compare every trial and the winners with an uninterrupted run; a task
leased to a worker that died with its sweep is claimed again once the lease expires. Crash
isolation: a config that kills its worker is recorded as crashed, one that hangs as timeout; the
worker is restarted, the task goes on, the sweep ends normally. SIGTERM exits 143, Ctrl-C 130."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.cli.robust import (
    CONFIGS,
    alive,
    children,
    count,
    lost_measurements,
    measure_log,
    query,
    remeasured_after_done,
    run_tuner,
    start_tuner,
    sweep_args,
    trial_rows,
    wait_for,
    winners,
    write_landscape,
)
from tuner.cli.guard import run_guarded
from tuner.kernels.dense.space import default_config
from tuner.run.supervisor import (
    Terminated,
    _interrupt,
)

M_VALUES = (1, 2, 4, 8, 16, 32, 64, 128)
TASKS = 2 * len(M_VALUES)
# Per task, vLLM's default included. At about 0.5 ms of CPU a trial, each kill lets 5-15 trials
# through: 256 trials in all outlast the kills.
TRIALS = 16
SWEEP_KILLS = 8
WORKER_KILLS = 4
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
    run_tuner(*kill_args(landscape, db), cwd=db.parent)
    rows = trial_rows(f"sqlite:///{db}")
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
    assert trial_rows(f"sqlite:///{db}") == rows  # no trial lost, none stored twice, same values
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


def test_sweep_killed_8_times_resumes_to_the_same_trials_and_winners(
    landscape, uninterrupted, tmp_path
):
    rng = random.Random(20261201)
    db, log_path = tmp_path / "tuner.db", tmp_path / "measured.log"
    env = {"TUNER_LEASE_S": LEASE_S, "TUNER_TEST_MEASURE_LOG": str(log_path)}
    kills = []
    while len(kills) < SWEEP_KILLS:
        # a few trials into the run (0: while it starts), then a random fraction of a trial
        after, pause_s = rng.choice([0, 1, 1, 2, 3, 4]), rng.uniform(0.0, 0.03)
        if after == 0:
            pause_s = rng.uniform(0.1, 1.0)
        sweep = start_tuner(*kill_args(landscape, db), cwd=tmp_path, quiet=True, **env)
        running = new_trials_then(db, sweep, after, pause_s)
        if not running:
            break
        os.kill(sweep.pid, signal.SIGKILL)
        sweep.wait(10)
        kills.append((after, round(pause_s, 3), count(db, "SELECT count(*) FROM trials")))
    # (new trials, pause s, trials stored) per kill
    assert len(kills) == SWEEP_KILLS, f"the sweep finished before all kills: shorten {kills}"
    run_tuner(*kill_args(landscape, db), cwd=tmp_path, **env)
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
    rng = random.Random(8)
    db, log_path = tmp_path / "tuner.db", tmp_path / "measured.log"
    env = {"TUNER_LEASE_S": LEASE_S, "TUNER_TEST_MEASURE_LOG": str(log_path)}
    sweep = start_tuner(*kill_args(landscape, db), cwd=tmp_path, **env)
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
    assert len(kills) == WORKER_KILLS, kills  # (new trials, pause s, pid) per kill
    assert sweep.returncode == 0, err
    assert out.count("killed by SIGKILL; its task goes back to the queue") == WORKER_KILLS
    check_against(db, log_path, len(kills), uninterrupted)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_killed_sweep_leaves_no_worker_and_resumes(landscape, uninterrupted, tmp_path, sig):
    db = tmp_path / "tuner.db"
    # Replayed trials of 50 ms: the kill lands mid-sweep.
    env = {"TUNER_LEASE_S": LEASE_S, "TUNER_TEST_TRIAL_SLEEP_S": "0.05"}
    sweep = start_tuner(*kill_args(landscape, db), cwd=tmp_path, **env)
    wait_for(lambda: count(db, "SELECT count(*) FROM trials") >= 2, 60, "no trial stored")
    workers = children(sweep.pid)
    assert workers, "the sweep has no worker process"
    os.kill(sweep.pid, sig)
    sweep.wait(30)
    assert sweep.stderr is not None
    if sig == signal.SIGTERM:
        assert sweep.returncode == 143  # 128 + SIGTERM, as a shell reports it
        assert sweep.stderr.read().splitlines()[-1] == (
            "error: terminated (SIGTERM); finished work is stored: run the same command to resume"
        )
        assert count(db, "SELECT count(*) FROM tasks WHERE state = 'running'") == 0
    wait_for(lambda: not any(alive(pid) for pid in workers), 8, "a worker outlived the sweep")
    stored = count(db, "SELECT count(*) FROM trials")
    assert stored < TASKS * TRIALS  # cut short, not finished by an orphan
    time.sleep(1)
    assert count(db, "SELECT count(*) FROM trials") == stored  # nobody measures any more
    again = run_tuner(*kill_args(landscape, db), cwd=tmp_path, TUNER_LEASE_S=LEASE_S)
    run_now = int(" ".join(again.stdout.split()).split(" trials run now")[0].split()[-1])
    assert run_now == TASKS * TRIALS - stored  # none lost, none measured twice
    assert trial_rows(f"sqlite:///{db}") == uninterrupted[0]


# Crash isolation and the lease, on 6 configs that grid searches all.
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


def test_crashing_configs_are_recorded_and_the_sweep_goes_on(folder):
    labels = f"{CRASHER.short()};{DEFAULT.short()}"
    run = run_tuner(*grid_sweep(folder, "16"), cwd=folder, TUNER_FAULT_CRASH=labels)
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
    assert time.monotonic() - start > 2 * 1.5
    rows = statuses(folder)
    error = "no result after 1.5 s (trial timeout); worker killed"
    assert [(label, status, text) for _, label, status, _, text in rows] == [
        (c.short(), "timeout", error) if c == CRASHER else (c.short(), "ok", None) for c in SMALL
    ]
    assert run.stdout.count(f"killed by SIGKILL while measuring {CRASHER.short()}") == 2
    assert count(folder / "tuner.db", "SELECT count(*) FROM tasks WHERE state = 'done'") == 2


def test_task_of_a_dead_worker_is_claimed_again_when_its_lease_expires(folder):
    """SIGKILL the sweep and its worker together: nobody hands the task back."""
    db = folder / "tuner.db"
    # The worker hangs on the third config, so the first task is surely running when killed
    # (replayed trials take microseconds: without the hang the sweep could be over by then).
    hang = {"TUNER_LEASE_S": "4", "TUNER_FAULT_HANG": CRASHER.short()}
    sweep = start_tuner(*grid_sweep(folder, "16"), cwd=folder, quiet=True, new_session=True, **hang)
    wait_for(lambda: count(db, "SELECT count(*) FROM trials") >= 2, 60, "no trial stored")
    os.killpg(sweep.pid, signal.SIGKILL)
    sweep.wait(10)
    time.sleep(0.5)
    [(task_id, worker_id, expires)] = query(
        db, "SELECT task_id, worker_id, lease_expires_at FROM tasks WHERE state = 'running'"
    )
    run_tuner(*grid_sweep(folder, "16"), cwd=folder, TUNER_LEASE_S="4")
    [(state, attempts, new_worker, started)] = query(
        db, "SELECT state, attempts, worker_id, started_at FROM tasks WHERE task_id = ?", task_id
    )
    assert (state, attempts) == ("done", 2)
    assert new_worker != worker_id
    assert started >= expires  # not before the dead worker's lease ended
    assert count(db, "SELECT count(*) FROM trials") == 2 * len(SMALL)


@pytest.mark.parametrize(
    ("raised", "code", "what"),
    [(Terminated, 143, "terminated (SIGTERM)"), (KeyboardInterrupt, 130, "interrupted")],
)
def test_an_interrupt_reaching_the_top_is_one_line(capsys, raised, code, what):
    """SIGTERM (`Terminated`, raised by the supervisor's handler) exits 128 + SIGTERM, Ctrl-C
    128 + SIGINT, in one line."""
    with pytest.raises(Terminated):
        _interrupt(signal.SIGTERM, None)

    def app():
        raise raised

    with pytest.raises(SystemExit) as exited:
        run_guarded(app)
    assert exited.value.code == code
    line = f"{what}; finished work is stored: run the same command to resume"
    assert capsys.readouterr().err.splitlines() == [line]
