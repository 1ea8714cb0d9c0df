"""The service across store faults: the first request after the store's
server dropped every pooled connection succeeds, and the download counter counts every status,
503 from an unavailable store included."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from api.app import create_app
from api.settings import Settings
from db.connection import connect
from tests.cli.test_robust_writers import reset_postgresql
from tests.storefill import DEFAULT, FAST, SLOW, fill, publish

PG_URL = os.environ.get("TUNER_TEST_PG_URL")
PLAN = {
    (576, 7168, 1): [(DEFAULT, True, "ok", 10.0), (FAST, False, "ok", 6.0)],
    (576, 7168, 16): [(DEFAULT, True, "ok", 10.0), (SLOW, False, "ok", 12.0)],
}
NAME = "N=576,K=7168,device_name=NVIDIA_L20,dtype=fp8_w8a8,block_shape=[128,128].json"


def drop_other_connections(url: str) -> int:
    """Have the server end every other session on this database, as a restart ends them all;
    returns how many it ended."""
    engine = connect(url)
    try:
        with engine.connect() as connection:
            return len(
                connection.execute(
                    text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    )
                ).all()
            )
    finally:
        engine.dispose()


@pytest.mark.skipif(
    not PG_URL,
    reason="TUNER_TEST_PG_URL is not set (a scratch PostgreSQL database, as .ci/run sets up)",
)
def test_the_first_request_after_the_server_dropped_the_pool_succeeds() -> None:
    reset_postgresql(PG_URL)
    fill(PG_URL, PLAN, m_values=(1, 16))
    publish(PG_URL)
    with TestClient(create_app(Settings(db_url=PG_URL))) as client:
        assert client.get(f"/devices/L20/configs/{NAME}").status_code == 200  # pools one
        assert client.get("/devices/L20/configs").status_code == 200
        assert drop_other_connections(PG_URL) >= 1  # the app's pooled connection is dead now
        for path in (f"/devices/L20/configs/{NAME}", "/devices/L20/configs", "/devices"):
            response = client.get(path)
            assert response.status_code == 200, response.text


def test_downloads_are_counted_whatever_their_status(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    fill(url, PLAN, m_values=(1, 16))
    publish(url)
    with TestClient(create_app(Settings(db_url=url))) as client:
        assert client.get(f"/devices/L20/configs/{NAME}").status_code == 200
        assert client.get("/devices/H100/configs.zip").status_code == 404
        assert client.get("/devices/L20/configs.zip", params={"release": 0}).status_code == 422
        assert client.get("/devices/L20/preview/configs.zip").status_code == 200
        lines = set(client.get("/metrics").text.splitlines())
    for expected in (
        'tuner_downloads_total{route="configs/file",status="200"} 1.0',
        'tuner_downloads_total{route="configs.zip",status="404"} 1.0',
        'tuner_downloads_total{route="configs.zip",status="422"} 1.0',
        'tuner_downloads_total{route="preview/configs.zip",status="200"} 1.0',
    ):
        assert expected in lines, expected
    assert not any(
        line.startswith('tuner_downloads_total{route="devices') for line in lines
    )  # other routes are not downloads


def test_a_503_download_is_counted(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as connection:  # tables, no schema revision: open_store refuses
        connection.execute("CREATE TABLE foo (x INTEGER)")
    with TestClient(create_app(Settings(db_url=f"sqlite:///{path}"))) as client:
        response = client.get(f"/devices/L20/configs/{NAME}")
        assert response.status_code == 503 and response.headers["retry-after"] == "60"
        lines = set(client.get("/metrics").text.splitlines())
    assert 'tuner_downloads_total{route="configs/file",status="503"} 1.0' in lines
