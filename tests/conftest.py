"""Shared test setup: Triton's CPU interpreter unless the caller chose otherwise, and an empty
user shapes folder per test (never the developer's own ~/.config)."""

import functools
import os
from pathlib import Path

import pytest

# Must happen before tuner.kernels.dense.kernel is imported: triton.jit reads it when it decorates
# the kernel.
os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(autouse=True)
def _user_shapes_dir(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TUNER_SHAPES_DIR", str(tmp_path_factory.mktemp("user-shapes")))


@pytest.fixture
def no_visible_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """A host without a CUDA GPU, as CI is: `tuner.run.gpus.visible_gpus` answers none, whatever
    GPU the machine running the tests has."""
    from tuner.run import gpus

    monkeypatch.setattr(gpus, "visible_gpus", lambda: [])


@functools.cache
def _uses_postgresql(path: Path) -> bool:
    return "TUNER_TEST_PG_URL" in path.read_text()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (`--dist loadgroup`), every test that may use the one scratch
    PostgreSQL database runs in one worker, one after another: they drop and recreate its
    tables."""
    for item in items:
        conftest = item.path.parent / "conftest.py"
        if _uses_postgresql(item.path) or (conftest.exists() and _uses_postgresql(conftest)):
            item.add_marker(pytest.mark.xdist_group("postgresql"))
