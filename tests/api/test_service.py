"""The service itself: /health, the index page, a bad setting, /metrics, the
OpenAPI description of every route, and store faults answered 503 with Retry-After, never 500."""

from __future__ import annotations

import os
import pkgutil
import re
import sqlite3
import subprocess
import sys
from importlib import import_module
from pathlib import Path
from typing import get_args

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from sqlalchemy import text
from sqlalchemy.exc import TimeoutError as PoolTimeout
from typer.testing import CliRunner

import api.routes
import tuner
from api.app import create_app
from api.schemas import EngineName
from api.settings import Settings
from db.connection import connect, open_store
from tests.api.conftest import FILE_A
from tests.storefill import DEFAULT, fill, publish, reset_postgresql
from tuner.cli.app import app as cli_app
from tuner.files.mounts import RENDERERS, MountFormat
from tuner.kernels.engines import ENGINES

PG_URL = os.environ.get("TUNER_TEST_PG_URL")


def app_on(path: Path, **settings) -> TestClient:
    return TestClient(create_app(Settings(db_url=f"sqlite:///{path}", **settings)))


def test_health_index_and_settings(client: TestClient, store_url: str, monkeypatch) -> None:
    health = {"status": "ok", "version": tuner.__version__, "store": store_url}
    assert client.get("/health").json() == health
    masked = Settings(db_url="postgresql+psycopg://tuner:s3cret@db.example/tuner").masked_db_url()
    assert masked == "postgresql+psycopg://tuner:***@db.example/tuner"
    page = client.get("/").text
    links = re.findall(r'<a href="([^"]+)">', page)
    reports = ["/devices/NVIDIA_H200/report", "/devices/NVIDIA_L20/report"]
    assert links == ["/docs", "/openapi.json", "/health", "/devices", *reports]
    assert all(client.get(link).status_code == 200 for link in links)
    assert "<code>/devices/{device_name}/report</code>" in page
    for name, value in (("DB_URL", store_url), ("ALLOW_PARTIAL", "true"), ("PORT", "8123")):
        monkeypatch.setenv(f"TUNER_{name}", value)
    monkeypatch.setenv("TUNER_API_TOKEN", "  padded  ")  # blank around it: stripped
    monkeypatch.setenv("TUNER_MAX_BODY_BYTES", "1000")
    settings = Settings()
    got = (settings.db_url, settings.allow_partial, settings.port, settings.host)
    assert got == (store_url, True, 8123, "127.0.0.1")
    assert (settings.api_token.get_secret_value(), settings.max_body_bytes) == ("padded", 1000)


def test_the_index_of_an_empty_store(tmp_path: Path) -> None:
    open_store(f"sqlite:///{tmp_path / 't.db'}").dispose()
    with app_on(tmp_path / "t.db") as client:
        assert (
            "<h2>Devices</h2><p>None in the store yet (<code>tuner sweep</code> or "
            "<code>tuner import</code> adds one).</p>"
        ) in client.get("/").text


def test_a_bad_setting_stops_serve_in_one_line(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TUNER_MAX_BODY_BYTES", "0")
    open_store(f"sqlite:///{tmp_path / 't.db'}").dispose()
    result = CliRunner().invoke(cli_app, ["serve", "--db", f"sqlite:///{tmp_path / 't.db'}"])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and len(result.stderr.strip().splitlines()) == 1


DEVICE_ROUTES = "comparisons configs configs.zip configs/{file_name} imports mounts preview/configs"
DEVICE_ROUTES += " preview/configs.zip preview/configs/{file_name} releases report"
ROUTES = [f"get /devices/{{device_name}}/{p}" for p in DEVICE_ROUTES.split()]
ROUTES += ["get /devices", "get /health", "get /metrics", "get /sweeps/{sweep_id}", "post /sweeps"]
ROUTES = sorted([*ROUTES, "post /devices/{device_name}/imports"])


def test_every_route_is_described_typed_and_answers_a_model(tmp_path: Path) -> None:
    app = create_app(Settings(db_url=f"sqlite:///{tmp_path / 't.db'}"))
    paths = app.openapi()["paths"]
    modules = [
        import_module(f"api.routes.{m.name}") for m in pkgutil.iter_modules(api.routes.__path__)
    ]
    routes = [r for m in modules for r in m.router.routes if isinstance(r, APIRoute)]
    assert sorted(f"{m} {p}" for p, ops in paths.items() for m in ops) == ROUTES  # and GET /
    for route in routes:  # JSON has a model; files, text, HTML and metrics are Responses
        assert (
            route.response_model is not None or route.response_class.__name__ != "JSONResponse"
        ), route.path
    for path, ops in paths.items():
        for method, op in ops.items():
            assert (
                op["summary"] and op["description"].strip() and "Args:" not in op["description"]
            ), path
            for parameter in op.get("parameters", []):
                assert parameter.get("description", "").strip(), (path, parameter["name"])
                if parameter["name"] in ("engine", "format", "out_dtype"):  # typed, not free text
                    schema = parameter["schema"].get("anyOf", [parameter["schema"]])[0]
                    assert "enum" in schema or "$ref" in schema, (path, parameter["name"])
            if method == "post":  # RequestGuard asks every write for the token
                assert op["security"] == [{"HTTPBearer": []}], path
    assert get_args(EngineName) == ENGINES and get_args(MountFormat) == tuple(RENDERERS)


def test_the_service_imports_no_torch_or_triton() -> None:
    code = "import api.app, sys; assert not {'torch', 'triton'} & set(sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_metrics_count_every_download_by_status(client: TestClient) -> None:
    etag = client.get(f"/devices/L20/configs/{FILE_A}").headers["etag"]  # a new app: counters at 0
    client.get(f"/devices/L20/configs/{FILE_A}", headers={"If-None-Match": etag})
    client.get("/devices/H100/configs.zip")
    client.get("/devices/L20/configs.zip", params={"release": 0})
    client.get("/devices/L20/preview/configs.zip")
    client.get("/devices/L20")
    response = client.get("/metrics")
    assert response.headers["content-type"].startswith("text/plain")
    lines = set(response.text.splitlines())
    assert {
        "tuner_store_up 1.0",
        'tuner_trials{status="ok"} 14.0',
        'tuner_trials{status="crashed"} 0.0',
        'tuner_tasks{state="done"} 7.0',
        "tuner_sweeps 2.0",
        "tuner_imports 0.0",
        'tuner_downloads_total{route="configs/file",status="200"} 1.0',
        'tuner_downloads_total{route="configs/file",status="304"} 1.0',
        'tuner_downloads_total{route="configs.zip",status="404"} 1.0',
        'tuner_downloads_total{route="configs.zip",status="422"} 1.0',
        'tuner_downloads_total{route="preview/configs.zip",status="200"} 1.0',
    } <= lines
    assert len([line for line in lines if line.startswith("tuner_downloads_total{")]) == 5


def test_a_store_at_another_schema_is_503_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as connection:  # tables, no schema revision: open_store refuses
        connection.execute("CREATE TABLE sweeps (sweep_id INTEGER PRIMARY KEY)")
    with app_on(path) as client:
        response = client.get(f"/devices/L20/configs/{FILE_A}")
        assert (response.status_code, response.headers["retry-after"]) == (503, "60")
        assert "tuner db upgrade" in response.json()["detail"]
        assert client.get("/health").status_code == 200
        metrics = client.get("/metrics").text.splitlines()
    assert "tuner_store_up 0.0" in metrics
    assert 'tuner_downloads_total{route="configs/file",status="503"} 1.0' in metrics


def test_an_unreachable_or_busy_store_is_503(tmp_path: Path, store_url: str, monkeypatch) -> None:
    url = f"sqlite:///{tmp_path}"  # a folder: SQLite cannot open it
    with TestClient(create_app(Settings(db_url=url)), raise_server_exceptions=False) as client:
        response = client.get("/devices/L20/configs")
    assert (response.status_code, response.headers["retry-after"]) == (503, "5")
    assert response.json() == {"detail": f"store {url} is unavailable (OperationalError)"}

    def busy(*_args, **_kwargs):
        raise PoolTimeout("QueuePool limit of size 40 overflow 0 reached")

    monkeypatch.setattr("db.repo.get_release", busy)
    with TestClient(
        create_app(Settings(db_url=store_url)), raise_server_exceptions=False
    ) as client:
        response = client.get(f"/devices/L20/configs/{FILE_A}")
        pool = client.app.state.store.open().pool
    assert (response.status_code, response.headers["retry-after"]) == (503, "1")
    assert response.json() == {"detail": f"store {store_url} is busy: every connection is in use"}
    assert (pool.size(), pool._max_overflow, pool._timeout) == (40, 0, 10.0)  # a thread each


@pytest.mark.skipif(
    not PG_URL, reason="TUNER_TEST_PG_URL is not set (a scratch PostgreSQL database)"
)
def test_the_first_request_after_the_server_dropped_the_pool_succeeds() -> None:
    reset_postgresql(PG_URL)
    fill(PG_URL, {(576, 7168, 1): [(DEFAULT, True, "ok", 10.0)]}, m_values=(1,))
    publish(PG_URL)
    with TestClient(create_app(Settings(db_url=PG_URL))) as client:
        assert client.get("/devices/L20/configs").status_code == 200  # pools a connection
        engine = connect(PG_URL)
        with engine.connect() as connection:  # as a server restart ends every session
            ended = connection.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            ).all()
        engine.dispose()
        assert ended
        for path in ("/devices/L20/configs", "/devices"):
            assert client.get(path).status_code == 200, path
