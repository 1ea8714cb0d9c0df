"""Store fixtures: a fresh store per test on a temporary SQLite file, and on PostgreSQL too.

PostgreSQL runs only when TUNER_TEST_PG_URL names a scratch database (for example
`postgresql+psycopg://postgres@127.0.0.1:5432/tuner_test`): every tuner table in it is dropped
before each test.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from db.connection import connect, open_store
from db.models import Base

BACKENDS = ["sqlite"] + (["postgresql"] if os.environ.get("TUNER_TEST_PG_URL") else [])


def _reset_postgresql(url: str) -> None:
    engine = connect(url)
    try:
        with engine.begin() as connection:
            Base.metadata.drop_all(connection)
            connection.execute(text("DROP TABLE IF EXISTS alembic_version"))
    finally:
        engine.dispose()


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of an empty database: a new SQLite file, or the reset PostgreSQL scratch db."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store' / 'tuner.db'}"
    url = os.environ["TUNER_TEST_PG_URL"]
    _reset_postgresql(url)
    return url


@pytest.fixture
def engine(store_url: str) -> Iterator[Engine]:
    """An opened store (schema at head)."""
    opened = open_store(store_url)
    yield opened
    opened.dispose()
