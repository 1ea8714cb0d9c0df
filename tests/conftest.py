"""Shared test setup: Triton's CPU interpreter unless the caller chose otherwise, and an empty
user shapes folder per test (never the developer's own ~/.config)."""

import os

import pytest
from sqlalchemy import create_engine, make_url, text

# Must happen before tuner.kernels.dense.kernel is imported: triton.jit reads it when it decorates
# the kernel.
os.environ.setdefault("TRITON_INTERPRET", "1")
# pytest-xdist's workers start with COLUMNS=80 and LINES=24 set; a rich Console made while they
# are set keeps that width for good, so tables would wrap where a serial run's do not.
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)


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


def _database_per_xdist_worker() -> None:
    """Under pytest-xdist each worker gets its own scratch PostgreSQL database (the given one's
    name plus the worker's, created once), so two workers never drop each other's tables."""
    url, worker = os.environ.get("TUNER_TEST_PG_URL"), os.environ.get("PYTEST_XDIST_WORKER")
    if not url or not worker:
        return
    base = make_url(url)
    name = f"{base.database}_{worker}"
    engine = create_engine(base, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        exists = f"SELECT 1 FROM pg_database WHERE datname = '{name}'"
        if connection.execute(text(exists)).scalar() is None:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
    engine.dispose()
    os.environ["TUNER_TEST_PG_URL"] = base.set(database=name).render_as_string(hide_password=False)


_database_per_xdist_worker()
