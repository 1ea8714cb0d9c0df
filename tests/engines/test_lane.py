"""The lane's own rules, run with and without TUNER_ENGINE_WHEELS (so they run everywhere):
unset, its tests skip with one reason; set, nothing in it skips, and a missing wheel fails in
one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.engines.engine_code import FETCH, WHEELS_ENV

REPO = Path(__file__).resolve().parents[2]
ONE_TEST = "tests/engines/test_device_names.py"


def _pytest(args: list[str], wheels: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != WHEELS_ENV}
    if wheels is not None:
        env[WHEELS_ENV] = wheels
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_without_the_variable_the_lane_skips_with_one_reason() -> None:
    run = _pytest([ONE_TEST], None)
    assert run.returncode == 0, run.stdout[-2000:]
    assert run.stdout.splitlines()[-1].startswith("1 skipped in ")
    assert (
        f"{WHEELS_ENV} is not set: the real-engine lane reads vLLM's and SGLang's wheels "
        f"({FETCH}, then set {WHEELS_ENV} to the folder it prints)"
    ) in run.stdout


def test_with_the_variable_a_missing_wheel_fails_in_one_line(tmp_path) -> None:
    run = _pytest([ONE_TEST], str(tmp_path))
    assert run.returncode == 1, run.stdout[-2000:]
    assert run.stdout.splitlines()[-1].startswith("1 error in ")
    assert "skipped" not in run.stdout
    assert (
        f"no vllm-0.33.0 wheel in {tmp_path} ({WHEELS_ENV}): run {FETCH}" in run.stdout.splitlines()
    )


def test_with_the_variable_a_skip_or_xfail_is_a_failure(tmp_path) -> None:
    (tmp_path / "test_skipping.py").write_text(
        "import pytest\n\n"
        "def test_skips():\n    pytest.skip('no GPU here')\n\n\n"
        "@pytest.mark.xfail(reason='known')\ndef test_xfails():\n    assert False\n"
    )
    # The lane's conftest as a plugin, so its hook sees these two tests.
    args = ["-p", "tests.engines.conftest", str(tmp_path / "test_skipping.py")]
    run = _pytest(args, str(tmp_path))
    assert run.returncode == 1, run.stdout[-2000:]
    assert run.stdout.splitlines()[-1].startswith("2 failed in ")
    assert {line for line in run.stdout.splitlines() if "never skips" in line} >= {
        f"the real-engine lane never skips with {WHEELS_ENV} set: no GPU here",
        f"the real-engine lane never skips with {WHEELS_ENV} set: xfailed (known)",
    }
