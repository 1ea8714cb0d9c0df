"""Helpers of the CLI tests: `tuner` run in this process, and its borderless tables
(tuner.cli.tables) read back into cells."""

from __future__ import annotations

import contextlib
import re
import sqlite3

from fastapi.testclient import TestClient
from typer.testing import CliRunner

from api.app import create_app
from api.settings import Settings
from db.connection import open_store, session_scope
from tests.storefill import DEFAULT, FAST, SLOW
from tuner.cli.app import app

# Cells are at least three spaces apart; a cell holds single spaces at most.
CELL_SPLIT = re.compile(r"\s{2,}")
# One shape of NVIDIA_L20 at M = 1 (FAST beats the default) and M = 16 (the default wins).
PLAN = {
    (576, 7168, 1): [(DEFAULT, True, "ok", 10.0), (FAST, False, "ok", 6.0)],
    (576, 7168, 16): [(DEFAULT, True, "ok", 10.0), (SLOW, False, "ok", 12.0)],
}


def invoke(*args, code: int | None = None, **options):
    """`tuner ARGS` in this process (each argument str()-ed), asserting that it exited `code`
    when given (its output in the failure message); `options` as
    `typer.testing.CliRunner.invoke` takes them (env, terminal_width)."""
    result = CliRunner().invoke(app, [str(arg) for arg in args], **options)
    assert code is None or result.exit_code == code, result.output
    return result


def ok(*args, **options):
    """`invoke`, asserting that the command exited 0."""
    return invoke(*args, code=0, **options)


def query(path, sql: str, *params) -> list[tuple]:
    """The rows of `sql` (with `params`) on the SQLite file at `path`; a write is committed."""
    with sqlite3.connect(path, timeout=30) as connection:
        return connection.execute(sql, params).fetchall()


def service(url: str) -> TestClient:
    """The HTTP service on the store at `url`, in this process (enter it as a context)."""
    return TestClient(create_app(Settings(db_url=url)))


@contextlib.contextmanager
def session_on(url: str):
    """A session on the store at `url` (committed at the end), its engine disposed of after."""
    engine = open_store(url)
    try:
        with session_scope(engine) as session:
            yield session
    finally:
        engine.dispose()


def one_line_error(result, text: str, code: int = 2) -> None:
    """The command exited `code` with `error: TEXT` as its one line on stderr."""
    assert result.exit_code == code, result.output
    assert result.stderr.strip().splitlines() == [f"error: {text}"]


def flat(text: str) -> str:
    """The text with every run of whitespace made one space."""
    return " ".join(text.split())


def table_rows(text: str, first: str = r"\d+") -> list[list[str]]:
    """The body rows of a printed table whose first cell matches `first` (a regex), split into
    cells. Header, rule, title and note lines never start that way."""
    start = re.compile(rf"\s*(?:{first}) {{2,}}")
    return [CELL_SPLIT.split(line.strip()) for line in text.splitlines() if start.match(line)]
