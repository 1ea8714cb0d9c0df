"""`tuner publish` run by several processes at the same moment: identical
files make one release, whoever wins, on a SQLite file and on PostgreSQL."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from sqlalchemy import text

from db.connection import connect
from tests.cli.robust import tuner_command, tuner_env
from tests.cli.test_robust_writers import reset_postgresql
from tests.storefill import DEFAULT, FAST, SLOW, TRITON, fill

PLAN = {
    (576, 7168, 1): [(DEFAULT, True, "ok", 10.0), (FAST, False, "ok", 6.0)],
    (576, 7168, 16): [(DEFAULT, True, "ok", 10.0), (SLOW, False, "ok", 12.0)],
}
PROCESSES = 3
PG_URL = os.environ.get("TUNER_TEST_PG_URL")


def publish_at_once(url: str, cwd: Path) -> list[str]:
    """PROCESSES `tuner publish` started together; their stdout lines once all exit 0."""
    processes = [
        subprocess.Popen(
            tuner_command("publish", "--device", "L20", "--db", url),
            cwd=cwd,
            env=tuner_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(PROCESSES)
    ]
    results = [(p.communicate(timeout=120), p.returncode) for p in processes]
    for (_, err), code in results:
        assert code == 0, err
    return sorted(out.strip() for (out, _), _ in results)


def releases(url: str) -> list[int]:
    engine = connect(url)
    try:
        with engine.connect() as connection:
            return list(connection.execute(text("SELECT number FROM releases")).scalars())
    finally:
        engine.dispose()


def check(url: str, cwd: Path) -> None:
    fill(url, PLAN, m_values=(1, 16))
    lines = publish_at_once(url, cwd)
    unchanged = (
        "NVIDIA_L20: files unchanged since release 1; no new release; tuned with "
        f"torch 2.11.0, triton {TRITON}, kernels of builtin"
    )
    assert lines[:-1] == [unchanged] * (PROCESSES - 1), lines
    assert lines[-1].startswith("published NVIDIA_L20 release 1: 1 file(s), content "), lines
    assert releases(url) == [1]


def test_concurrent_publish_on_sqlite(tmp_path: Path) -> None:
    check(f"sqlite:///{tmp_path / 'tuner.db'}", tmp_path)


@pytest.mark.skipif(
    not PG_URL,
    reason="TUNER_TEST_PG_URL is not set (a scratch PostgreSQL database, as .ci/run sets up)",
)
def test_concurrent_publish_on_postgresql(tmp_path: Path) -> None:
    reset_postgresql(PG_URL)
    check(PG_URL, tmp_path)
