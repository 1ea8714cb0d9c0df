"""`tuner serve` at start: a blank or missing TUNER_API_TOKEN is one line on
stderr saying the write routes are closed; a set one says nothing; the app gets the settings."""

from __future__ import annotations

from pathlib import Path

import pytest
import uvicorn

from db.connection import open_store
from tests.cli.common import ok

CLOSED = (
    "note: TUNER_API_TOKEN is unset or blank: write routes (POST /sweeps, POST "
    "/devices/{device_name}/imports) answer 403"
)


@pytest.mark.parametrize(
    ("token", "lines"), [(None, [CLOSED]), ("", [CLOSED]), ("  ", [CLOSED]), ("tok", [])]
)
def test_serve_says_when_writes_are_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, token: str | None, lines: list[str]
) -> None:
    served = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: served.append((app, kw)))
    monkeypatch.delenv("TUNER_API_TOKEN", raising=False)
    env = {} if token is None else {"TUNER_API_TOKEN": token}
    monkeypatch.setenv("TUNER_MAX_BODY_BYTES", "5000")
    open_store(f"sqlite:///{tmp_path / 't.db'}").dispose()  # serve refuses a missing store
    result = ok("serve", "--db", f"sqlite:///{tmp_path / 't.db'}", "--port", "8123", env=env)
    assert result.stderr.splitlines() == lines
    [(service, options)] = served
    assert options == {"host": "127.0.0.1", "port": 8123}
    settings = service.state.settings
    assert settings.max_body_bytes == 5000
    assert (settings.api_token is None) == (token != "tok")
