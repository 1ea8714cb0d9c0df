"""Helpers of the robustness tests: a replay landscape for `tiny`, the CLI, the store's rows."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
import zlib
from collections import Counter
from pathlib import Path

from sqlalchemy import create_engine, text

from bench.landscape_file import landscape_from_results, landscape_json
from db import repo
from tests.cli.common import query, session_on
from tuner.core import TrialStatus
from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.space import default_config
from tuner.measure.trial import TrialResult

SHAPES = ((256, 384), (576, 256))  # the `tiny` model
ENVIRONMENT = {
    "gpu_name": "NVIDIA L20",
    "compute_capability": "8.9",
    "driver": "580.1",
    "cuda": "12.9",
    "torch": "2.11.0",
    "triton": "3.6.0",
    "tuner": "0.1.0",
    "kernel_hash": "robust",
}
# 96 candidates; vLLM's default (64x128x128 g32 w4 s2) among them.
CONFIGS = tuple(
    KernelConfig(bm, bn, 128, group, warps, stages)
    for bm in (16, 32, 64, 128)
    for bn in (64, 128, 256)
    for group in (1, 32)
    for warps in (4, 8)
    for stages in (2, 3)
)
assert default_config() in CONFIGS


def latency_us(n: int, k: int, m: int, config: KernelConfig) -> float:
    """A made-up, deterministic latency with a per-(problem, config) jitter, so that searches
    of different M take different paths."""
    jitter = zlib.crc32(f"{n}:{k}:{m}:{config.short()}".encode()) % 1000 / 100
    return (
        20.0
        + abs(config.BLOCK_SIZE_M - 2 * m) / 8
        + 512 / config.BLOCK_SIZE_N
        + config.num_stages
        + config.num_warps / 4
        + jitter
    )


def write_landscape(folder: Path, m_values: tuple[int, ...]) -> tuple[Path, Path]:
    """A landscape of CONFIGS on NVIDIA_L20 for `tiny` at these M, and the --configs file.

    Returns:
        (landscape path, configs path).
    """
    results = []
    for n, k in SHAPES:
        for m in m_values:
            for config in CONFIGS:
                if config.BLOCK_SIZE_M == 128 and config.num_stages == 3:
                    result = TrialResult(TrialStatus.OUT_OF_RESOURCES, error="shared memory")
                else:
                    us = latency_us(n, k, m, config)
                    result = TrialResult(TrialStatus.OK, us, us - 0.5, us + 0.5)
                results.append((n, k, m, config, result))
    landscape = landscape_from_results(
        device_name="NVIDIA_L20",
        environment=ENVIRONMENT,
        recorded_at="2026-12-01T00:00:00Z",
        space="robust",
        out_dtype="bfloat16",
        block_shape=(128, 128),
        results=results,
    )
    path = folder / "l20.json"
    path.write_text(landscape_json(landscape))
    configs = folder / "configs.json"
    configs.write_text(json.dumps([c.as_dict() for c in CONFIGS]))
    return path, configs


ROOT = Path(__file__).resolve().parents[2]


def sweep_args(
    folder: Path, url: str, m: str, *extra: str, configs="configs.json", strategy="grid"
):
    """`tuner sweep` of `tiny` on NVIDIA_L20 over `folder`'s --configs file, replayed from its
    landscape (`write_landscape`), then `extra`."""
    args = f"sweep --device L20 --model tiny --m {m} --strategy {strategy} --db {url}".split()
    return [*args, "--configs", str(folder / configs), "--replay", str(folder / "l20.json"), *extra]


# The `tuner` command with fault-injecting runners, whose faults `tuner_env`'s variables set.
HOOKED = [sys.executable, "-m", "tests.cli.hooked"]


def tuner_env(**extra: str) -> dict[str, str]:
    """This process's environment without fault variables, the repository on PYTHONPATH (for
    `tests.cli.hooked` and `tests.faults`), then `extra`."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("TUNER_FAULT_", "TUNER_TEST_")) or key == "TUNER_TEST_PG_URL"
    }
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def start_tuner(*args: str, cwd: Path, quiet: bool = False, new_session: bool = False, **env: str):
    """`tuner ARGS` started in `cwd` (`HOOKED`, `tuner_env(**env)`), its stdout and
    stderr read as text through pipes, or thrown away when `quiet`; in a session of its own
    (a process group to kill) with `new_session`."""
    out = subprocess.DEVNULL if quiet else subprocess.PIPE
    pipes = {"stdout": out, "stderr": out, "text": True, "start_new_session": new_session}
    return subprocess.Popen([*HOOKED, *args], cwd=cwd, env=tuner_env(**env), **pipes)


def run_tuner(*args: str, cwd: Path, code: int = 0, timeout: float = 300, **env: str):
    """`tuner ARGS` run to its end in `cwd` (`HOOKED`, `tuner_env(**env)`), its output
    captured as text, asserting that it exited `code`."""
    options = {"capture_output": True, "text": True, "timeout": timeout}
    run = subprocess.run([*HOOKED, *args], cwd=cwd, env=tuner_env(**env), **options)
    assert run.returncode == code, run.stdout + run.stderr
    return run


def count(db: Path, sql: str) -> int:
    try:
        return query(db, sql)[0][0]
    except sqlite3.OperationalError:  # no table yet: the store is being created
        return 0


TRIAL_ROWS = (
    'SELECT t."N", t."K", t."M", r."BLOCK_SIZE_M", r."BLOCK_SIZE_N", r."BLOCK_SIZE_K", '
    'r."GROUP_SIZE_M", r.num_warps, r.num_stages, r.status, r.latency_us, r.is_default '
    "FROM trials r JOIN tasks t ON t.task_id = r.task_id"
)


def store_rows(url: str, sql: str) -> list[tuple]:
    """The rows of `sql` on the store at `url` (SQLite or PostgreSQL), sorted."""
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return sorted(tuple(row) for row in connection.execute(text(sql)))
    finally:
        engine.dispose()


def trial_rows(url: str) -> list[tuple]:
    """Every trial as (N, K, M, six config values, status, latency_us, is_default), sorted."""
    return store_rows(url, TRIAL_ROWS)


def winners(url: str, device_name: str = "NVIDIA_L20") -> list[tuple]:
    """db.repo.winners as comparable tuples (ids left out)."""
    with session_on(url) as session:
        rows = repo.winners(session, device_name=device_name)
    return [
        (r.N, r.K, r.M, tuple(r.config.values()), r.latency_us, r.default_latency_us) for r in rows
    ]


def measure_log(path: Path) -> list[tuple[int, str, int, str]]:
    """Lines of TUNER_TEST_MEASURE_LOG: (pid, start|done, task_id, config label)."""
    rows = [line.split("\t") for line in path.read_text().splitlines()] if path.exists() else []
    return [(int(pid), event, int(task_id), label) for pid, event, task_id, label in rows]


def remeasured_after_done(log: list[tuple[int, str, int, str]]) -> list[tuple[int, str]]:
    """(task_id, label) measured again after its trial was stored: must be empty."""
    stored, again = set(), []
    for _pid, event, task_id, label in log:
        key = (task_id, label)
        if event == "done":
            stored.add(key)
        elif key in stored:
            again.append(key)
    return again


def lost_measurements(log: list[tuple[int, str, int, str]]) -> int:
    """Measurements started but never stored (their worker died): at most one per death."""
    starts = Counter((task_id, label) for _pid, event, task_id, label in log if event == "start")
    return sum(starts.values()) - len(starts)


def wait_for(predicate, timeout_s: float, what: str, every_s: float = 0.05) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(every_s)


def children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    try:
        return [int(child) for child in path.read_text().split()]
    except (FileNotFoundError, ProcessLookupError):
        return []


def alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return "State:\tZ" not in status
