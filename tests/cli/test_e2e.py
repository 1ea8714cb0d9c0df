"""End to end: interpreter sweep on `tiny` -> rows in SQLite -> files over HTTP from uvicorn."""

import io
import json
import re
import subprocess
import sys
import zipfile

import httpx
import pytest

from tests.cli.common import query
from tests.cli.robust import wait_for
from tests.pgserver import free_port

# M = 1 and a multiple of 16: both specializations of M
SWEEP = "sweep --device interpreter --model tiny --m 1,32 --strategy optuna --trials 3".split()
SWEEP += ["--interpreter-reps", "1"]
KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")


def expected_files(db):
    """Files computed straight from the decisions table: per task the config kept after the
    interleaved re-timing, unless vLLM's default config (re-timed with it) is at least as
    fast."""
    tasks = query(db, "SELECT task_id, N, K, M FROM tasks")
    files = {}
    for task_id, n, k, m in tasks:
        [decided] = query(
            db,
            f"SELECT {', '.join(KEYS)}, latency_us, default_latency_us "
            f"FROM decisions WHERE task_id = {task_id}",
        )
        default = (64, 128, 128, 32, 4, 2)
        chosen = decided if decided[6] < decided[7] else default
        name = (
            f"N={n},K={k},device_name=TRITON_INTERPRETER,dtype=fp8_w8a8,block_shape=[128,128].json"
        )
        files.setdefault(name, {})[m] = dict(zip(KEYS, chosen[:6], strict=True))
    return {
        name: json.dumps({str(m): configs[m] for m in sorted(configs)}, indent=4) + "\n"
        for name, configs in files.items()
    }


def test_every_trial_is_stored_checked_and_timed_against_the_default_and_served(tmp_path):
    sweep = [sys.executable, "-m", "tuner.cli", *SWEEP, "--db", f"sqlite:///{tmp_path}/tuner.db"]
    run = subprocess.run(sweep, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr
    db = tmp_path / "tuner.db"
    assert query(db, "SELECT count(*), sum(state = 'done') FROM tasks") == [(4, 4)]
    tasks = [(n, k, m) for n, k in ((256, 384), (576, 256)) for m in (1, 32)]
    assert sorted(query(db, "SELECT N, K, M FROM tasks")) == tasks
    per_task = query(
        db,
        "SELECT task_id, count(*), sum(is_default), sum(status = 'ok'), "
        "max(rel_error) FROM trials GROUP BY task_id",
    )
    assert len(per_task) == 4
    for _, trials, defaults, ok_trials, max_error in per_task:
        assert (trials, defaults, ok_trials) == (3, 1, 3)
        assert 0 < max_error < 1e-2
    defaults = query(db, f"SELECT DISTINCT {', '.join(KEYS)} FROM trials WHERE is_default")
    assert defaults == [(64, 128, 128, 32, 4, 2)]
    assert query(
        db,
        "SELECT count(*) FROM trials WHERE latency_us IS NULL "
        "OR p20_us > latency_us OR latency_us > p80_us",
    ) == [(0,)]
    assert query(db, "SELECT device_name FROM devices") == [("TRITON_INTERPRETER",)]
    assert "4/4 tasks done, 0 failed; 12 trials run now" in " ".join(run.stdout.split())
    # The time line: no compile pool on the interpreter; measure seconds are the sum of the
    # trials' measure_s, which the wall time covers.
    times = re.search(
        r"compile 0\.0 s, measure ([\d.]+) s, wall ([\d.]+) s",
        " ".join(run.stdout.split()),
    )
    assert times, run.stdout
    [(measure_s,)] = query(db, "SELECT sum(measure_s) FROM trials")
    assert float(times[1]) == pytest.approx(measure_s, abs=0.06)
    assert 0 < float(times[1]) < float(times[2])
    files_over_http_match_the_winners_in_the_store(tmp_path)


def files_over_http_match_the_winners_in_the_store(folder):
    """`tuner serve` on the store in `folder` serves the files `expected_files` computes."""
    expected = expected_files(folder / "tuner.db")
    port = free_port()
    serve = ["serve", "--db", f"sqlite:///{folder}/tuner.db", "--port", str(port)]
    server = subprocess.Popen(
        [sys.executable, "-m", "tuner.cli", *serve],
        cwd=folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:

        def up() -> bool:
            try:
                return httpx.get(f"{base}/health").status_code == 200
            except httpx.TransportError:
                return False

        wait_for(up, 60, "server did not come up", every_s=0.2)
        archive = httpx.get(f"{base}/devices/TRITON_INTERPRETER/configs.zip")
        assert archive.status_code == 200
        with zipfile.ZipFile(io.BytesIO(archive.content)) as zipped:
            names = [name for name in zipped.namelist() if name.endswith(".json")]
            got = {name: zipped.read(name).decode() for name in names}
        assert got == expected
        name = sorted(expected)[1]
        one = httpx.get(f"{base}/devices/TRITON_INTERPRETER/configs/{name}")
        assert one.status_code == 200
        assert one.text == expected[name]
        assert one.headers["content-type"].startswith("application/json")
        missing = httpx.get(f"{base}/devices/NVIDIA_L20/configs")
        assert missing.status_code == 404
        assert "TRITON_INTERPRETER" in missing.json()["detail"]
    finally:
        server.terminate()
        server.wait(10)
