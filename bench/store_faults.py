"""Store faults, repeated: a PostgreSQL restart and a 2 s stop during a slow trial, a server
that stays down (the sweep stops, then the same command resumes), a full SQLite store (page
limit); per run: trials expected vs found, duplicate (task, config), tasks failed, exit codes.

    python bench/store_faults.py            # 3 runs of each case
    python bench/store_faults.py --runs 10 --cases restart,outage

Needs PostgreSQL binaries (initdb, pg_ctl; as root, a `postgres` user) for the server cases.
Writes bench/results/store_faults_<date>.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import sqlite3
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.cli.robust import run_tuner, write_landscape  # noqa: E402
from tests.cli.test_robust_store_faults import (  # noqa: E402
    SMALL,
    TRIALS,
    all_rows,
    start_slow_sweep,
    store_args,
    wait_inside_a_trial,
)
from tests.pgserver import PrivatePostgres  # noqa: E402

CASES = ("restart", "stop-start", "outage", "disk-full")
OUT_DIR = ROOT / "bench" / "results"


def one_run(case: str, folder: Path) -> dict:
    """One fault run; the counts of its store after the (resumed) sweep."""
    codes, pg, url = [], None, None
    log = folder / f"measure-{time.monotonic_ns()}.log"
    if case == "disk-full":
        db = folder / f"full-{time.monotonic_ns()}.db"
        url = f"sqlite:///{db}"
        args = store_args(folder, url, "configs.json")
        codes.append(run_tuner(*args, "--no-run", cwd=folder).returncode)
        with sqlite3.connect(db) as connection:
            pages = connection.execute("PRAGMA page_count").fetchone()[0]
        codes.append(
            run_tuner(
                *args,
                cwd=folder,
                code=2,  # the full disk stops the sweep
                TUNER_STORE_TIMEOUT_S="2",
                TUNER_TEST_SQLITE_MAX_PAGES=str(pages),
            ).returncode
        )
        codes.append(run_tuner(*args, cwd=folder).returncode)
        expected = 4 * 96
    else:
        pg = PrivatePostgres().init()
        url = pg.url
        env = {"TUNER_STORE_TIMEOUT_S": "3", "TUNER_LEASE_S": "2"} if case == "outage" else {}
        sweep = start_slow_sweep(folder, url, log, **env)
        wait_inside_a_trial(log, 5)
        if case == "restart":
            pg.restart()
        else:
            pg.stop()
            time.sleep(2.0 if case == "stop-start" else 0)
            if case == "stop-start":
                pg.start()
        sweep.communicate(timeout=300)
        codes.append(sweep.returncode)
        if case == "outage":
            pg.start()
            time.sleep(2.5)
            codes.append(
                run_tuner(*store_args(folder, url), cwd=folder, TUNER_LEASE_S="2").returncode
            )
        expected = TRIALS
    rows = all_rows(url)
    if pg is not None:
        pg.destroy()
    states = dict(rows["states"])
    return {
        "case": case,
        "exit_codes": codes,
        "trials_expected": expected,
        "trials_found": len(rows["trials"]),
        # (task, config) seen twice; a trial row is its task's N, K, M and its config first.
        "duplicates": len(rows["trials"]) - len({row[:9] for row in rows["trials"]}),
        "tasks_failed": states.get("failed", 0),
        "decisions_per_task": sorted({n for *_, n in rows["decisions"]}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of each case")
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated cases")
    options = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="store-faults-"))
    write_landscape(folder, (1, 16))
    (folder / "small.json").write_text(json.dumps([c.as_dict() for c in SMALL]))
    results = []
    for case in options.cases.split(","):
        for _ in range(options.runs):
            if case != "disk-full" and not PrivatePostgres.available():
                print(f"{case}: skipped (no PostgreSQL binaries)")
                break
            result = one_run(case, folder)
            results.append(result)
            print(" ".join(f"{k}={v}" for k, v in result.items()), flush=True)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    out = OUT_DIR / f"store_faults_{datetime.now(UTC):%Y-%m-%d}.json"
    summary = {
        "device": "cpu (replay backend)",
        "python": platform.python_version(),
        "date": datetime.now(UTC).isoformat(),
        "runs": results,
    }
    out.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
