"""The lane's own rules, run with and without TUNER_ENGINE_WHEELS (so they run everywhere):
unset, its tests skip with one reason; set, a missing wheel fails in one line and a skip or
xfail of any test is a failure."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.engines.conftest import engine_wheels
from tests.engines.engine_code import FETCH, WHEELS_ENV

REPO = Path(__file__).resolve().parents[2]


def test_without_the_variable_the_lane_skips_with_one_reason(monkeypatch) -> None:
    monkeypatch.delenv(WHEELS_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception) as skipped:
        engine_wheels.__wrapped__()  # type: ignore[attr-defined]
    assert str(skipped.value) == (
        f"{WHEELS_ENV} is not set: the real-engine lane reads vLLM's and SGLang's wheels "
        f"({FETCH}, then set {WHEELS_ENV} to the folder it prints)"
    )


def test_with_the_variable_a_missing_wheel_or_a_skip_or_xfail_fails(tmp_path) -> None:
    (tmp_path / "test_skipping.py").write_text(
        "import pytest\n\n"
        "def test_skips():\n    pytest.skip('no GPU here')\n\n\n"
        "@pytest.mark.xfail(reason='known')\ndef test_xfails():\n    assert False\n\n\n"
        "def test_needs_vllm(vllm_wheel):\n    pass\n"
    )
    # The lane's conftest as a plugin, so its fixtures and hook see these tests.
    args = ["-p", "tests.engines.conftest", str(tmp_path / "test_skipping.py")]
    env = {**os.environ, WHEELS_ENV: str(tmp_path)}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = run.stdout.splitlines()
    assert run.returncode == 1, run.stdout[-2000:]
    assert lines[-1].startswith("2 failed, 1 error in ") and "skipped" not in run.stdout
    assert {line for line in lines if "never skips" in line} >= {
        f"the real-engine lane never skips with {WHEELS_ENV} set: no GPU here",
        f"the real-engine lane never skips with {WHEELS_ENV} set: xfailed (known)",
    }
    assert f"no vllm-0.33.0 wheel in {tmp_path} ({WHEELS_ENV}): run {FETCH}" in lines
