"""The real-engine lane: fixtures giving vLLM 0.33.0's and SGLang 0.5.23's wheels
(`tests.engines.engine_code` reads files from them and runs functions cut out of them).

Without TUNER_ENGINE_WHEELS the lane's tests are skipped with one reason, so the suite runs
without network. With it set (`.ci/run` sets it), they never skip: a missing wheel or file fails
its test, and a skip or xfail of any test in this folder is turned into a failure.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engines.engine_code import FETCH, WHEELS_ENV, engine_wheel, wheels_folder


@pytest.fixture(scope="session")
def engine_wheels() -> Path:
    """The folder of downloaded engine wheels; skips the test when TUNER_ENGINE_WHEELS is unset."""
    folder = wheels_folder()
    if folder is None:
        pytest.skip(
            f"{WHEELS_ENV} is not set: the real-engine lane reads vLLM's and SGLang's "
            f"wheels ({FETCH}, then set {WHEELS_ENV} to the folder it prints)"
        )
    return folder


@pytest.fixture(scope="session")
def vllm_wheel(engine_wheels: Path) -> Path:
    """The vllm-0.33.0 wheel."""
    return engine_wheel(engine_wheels, "vllm")


@pytest.fixture(scope="session")
def sglang_wheel(engine_wheels: Path) -> Path:
    """The sglang-0.5.23 wheel."""
    return engine_wheel(engine_wheels, "sglang")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """With TUNER_ENGINE_WHEELS set, a skipped or xfailed test of the lane is a failure."""
    outcome = yield
    report = outcome.get_result()
    if not report.skipped or wheels_folder() is None:
        return
    if hasattr(report, "wasxfail"):
        reason = f"xfailed ({report.wasxfail or 'no reason'})"
        del report.wasxfail
    else:
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        reason = reason.removeprefix("Skipped: ")
    report.outcome = "failed"
    report.longrepr = f"the real-engine lane never skips with {WHEELS_ENV} set: {reason}"
