"""`tuner sweep` again with more --trials extends the same sweep: one sweep in the store, only
the new trials measured, the same trials as an uninterrupted run at the larger budget."""

from __future__ import annotations

from pathlib import Path

from tests.cli.common import ok, query
from tests.cli.robust import sweep_args, write_landscape
from tuner.core import CONFIG_KEYS


def _sweep(folder: Path, db: str, trials: int, *more: str, m: str = "1,16") -> str:
    # optuna: its winners at 3 and 4 trials agree here, so do warm starts
    args = sweep_args(
        folder, f"sqlite:///{folder / db}", m, "--trials", str(trials), *more, strategy="optuna"
    )
    return " ".join(ok(*args).stdout.split())


TASK_CONFIG = ", ".join(("task_id", *CONFIG_KEYS))
CONFIGS = f"SELECT {TASK_CONFIG} FROM trials ORDER BY 1, 2, 3, 4, 5, 6, 7"


def test_more_trials_extend_the_sweep_and_measure_only_the_new_ones(tmp_path: Path) -> None:
    write_landscape(tmp_path, (1, 16, 32))
    db = tmp_path / "t.db"
    first = _sweep(tmp_path, "t.db", 3)
    assert "sweep 1 (new): NVIDIA_L20, tiny TP 1, 2 shapes x 2 M, optuna" in first
    before = query(db, "SELECT * FROM trials ORDER BY trial_id")
    assert len(before) == 12

    extended = _sweep(tmp_path, "t.db", 4)
    assert (
        "sweep 1 (extended from 3 to 4 trials per task, 4 done task(s) reopened): "
        "NVIDIA_L20, tiny TP 1, 2 shapes x 2 M, optuna, 1 worker(s)"
    ) in extended
    assert "sweep 1: 4/4 tasks done, 0 failed; 4 trials run now (16 stored, 16 ok)" in extended
    assert query(db, "SELECT sweep_id, budget FROM sweeps") == [(1, 4)]
    assert query(
        db,
        "SELECT task_id, state, count(*) FROM tasks JOIN trials USING (task_id) "
        "GROUP BY task_id ORDER BY task_id",
    ) == [(1, "done", 4), (2, "done", 4), (3, "done", 4), (4, "done", 4)]
    # The first run's trials are untouched, and no config is stored twice for a task.
    assert query(db, "SELECT * FROM trials ORDER BY trial_id")[:12] == before
    assert query(db, f"SELECT count(*) FROM (SELECT DISTINCT {TASK_CONFIG} FROM trials)") == [(16,)]
    assert query(db, "SELECT count(*) FROM decisions") == [(4,)]

    # The same trials as one run at --trials 4 (warm starts of the first run, same search).
    _sweep(tmp_path, "u.db", 4)
    assert query(db, CONFIGS) == query(tmp_path / "u.db", CONFIGS)

    # Equal or smaller budgets: the finished sweep stands, nothing is measured or stored again.
    extended_rows = query(db, "SELECT * FROM trials ORDER BY trial_id")
    for trials, label in ((4, "resumed"), (3, "resumed at its 4 trials per task, more than asked")):
        again = _sweep(tmp_path, "t.db", trials)
        assert f"sweep 1 ({label}): NVIDIA_L20" in again
        assert "sweep 1: 4/4 tasks done, 0 failed; 0 trials run now (16 stored" in again
    assert query(db, "SELECT sweep_id, budget FROM sweeps") == [(1, 4)]
    assert query(db, "SELECT * FROM trials ORDER BY trial_id") == extended_rows

    # A larger M grid is another sweep, but its (N, K, M) at 1 and 16 are the same
    # measurements: their 16 trials are reused, only M = 32's are measured.
    plan = _sweep(tmp_path, "t.db", 4, "--dry-run", m="1,16,32")
    assert "6 task(s) x 4 trial(s) = 24 trial(s), 16 reused from other sweeps" in plan
    assert "total: 6 task(s), 8 trial(s) to run (16 reused), 1 worker(s)" in plan
    wider = _sweep(tmp_path, "t.db", 4, m="1,16,32")
    assert "sweep 2 (new)" in wider
    assert (
        "sweep 2: 6/6 tasks done, 0 failed; 8 trials run now, 16 reused from other sweeps "
        "(24 stored, 23 ok)"
    ) in wider
    old, new = (
        query(
            db,
            "SELECT N, K, M, BLOCK_SIZE_M, BLOCK_SIZE_N, num_warps, num_stages, latency_us, "
            f"created_at FROM trials JOIN tasks USING (task_id) WHERE sweep_id = {sweep} "
            "AND M < 32 ORDER BY 1, 2, 3, 4, 5, 6, 7",
        )
        for sweep in (1, 2)
    )
    assert new == old and len(new) == 16
