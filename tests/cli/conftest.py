"""The CLI tests' store: a SQLite file in the test's folder."""

import pytest


@pytest.fixture
def db(tmp_path) -> str:
    """The URL of `tuner.db` in the test's `tmp_path` (not created)."""
    return f"sqlite:///{tmp_path / 'tuner.db'}"
