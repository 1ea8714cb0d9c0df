"""Mistakes users make on the command line get one line and exit 2, never a traceback:
a plain path as --db or TUNER_DB_URL, a port out of range; and a store whose
folder does not exist says that it created it."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tuner.cli.app import app

runner = CliRunner()


@pytest.mark.parametrize(
    "args, env, url",
    [
        (["status", "--db", "tuner.db"], {}, "tuner.db"),
        (["winners", "--device", "L20"], {"TUNER_DB_URL": "/some/file.db"}, "/some/file.db"),
        (["db", "upgrade", "--db", "x.db"], {}, "x.db"),
        (["serve", "--db", "tuner.db"], {}, "tuner.db"),
    ],
)
def test_a_plain_path_as_the_store_suggests_its_sqlite_url(args, env, url) -> None:
    result = runner.invoke(app, args, env=env)
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        f"error: --db (or TUNER_DB_URL) {url!r} is not a database URL; for a SQLite file use "
        f"sqlite:///{url}"
    ]
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_a_url_that_is_not_a_path_gets_no_sqlite_hint() -> None:
    result = runner.invoke(app, ["status", "--db", "my db://x"])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "error: --db (or TUNER_DB_URL) 'my db://x' is not a database URL"
    ]


@pytest.mark.parametrize("port", ["0", "99999"])
def test_serve_refuses_a_port_out_of_range(port: str) -> None:
    result = runner.invoke(app, ["serve", "--port", port, "--db", "sqlite://"])
    assert result.exit_code == 2
    assert "Invalid value for '--port'" in result.output
    assert "Traceback" not in result.output


def test_a_new_store_in_a_new_folder_says_it_created_the_folder(tmp_path: Path) -> None:
    folder = tmp_path / "no" / "such"
    result = runner.invoke(
        app,
        [
            "sweep",
            "--device",
            "interpreter",
            "--model",
            "tiny",
            "--m",
            "1",
            "--no-run",
            "--db",
            f"sqlite:///{folder / 'x.db'}",
        ],
    )
    assert result.exit_code == 0, result.output
    assert f"note: created folder {folder} for the store" in result.stderr.splitlines()
    assert (folder / "x.db").exists()
    again = runner.invoke(app, ["status", "--db", f"sqlite:///{folder / 'x.db'}"])
    assert again.exit_code == 0 and "created folder" not in again.stderr
