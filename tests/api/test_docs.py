"""/docs on an air-gapped host: FastAPI's pages load Swagger UI and ReDoc from a CDN, so
TUNER_DOCS_ASSETS serves Swagger UI's files from a local folder; /openapi.json needs nothing."""

from __future__ import annotations

import pkgutil
import re
from pathlib import Path

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from pydantic import ValidationError
from typer.testing import CliRunner

import api.routes
from api.app import create_app
from api.routes import (
    comparisons,
    devices,
    health,
    imports,
    index,
    metrics,
    mounts,
    releases,
    report,
    sweeps,
)
from api.settings import Settings
from db.connection import open_store
from tuner.cli.app import app as cli_app


@pytest.fixture
def assets(tmp_path: Path) -> Path:
    folder = tmp_path / "swagger-ui-dist"
    folder.mkdir()
    (folder / "swagger-ui-bundle.js").write_bytes(b"window.SwaggerUIBundle = 1;\n")
    (folder / "swagger-ui.css").write_bytes(b".swagger-ui {}\n")
    return folder


def client(tmp_path: Path, **settings) -> TestClient:
    return TestClient(create_app(Settings(db_url=f"sqlite:///{tmp_path / 't.db'}", **settings)))


def test_default_docs_need_the_cdn_and_openapi_json_does_not(tmp_path: Path) -> None:
    with client(tmp_path) as http:
        page = http.get("/docs").text
        assert "https://cdn.jsdelivr.net/npm/swagger-ui-dist@5/swagger-ui-bundle.js" in page
        assert "https://cdn.jsdelivr.net/npm/redoc@2" in http.get("/redoc").text
        spec = http.get("/openapi.json")
        assert spec.status_code == 200 and "/sweeps" in spec.json()["paths"]


def test_docs_assets_serve_swagger_ui_from_the_service(tmp_path: Path, assets: Path) -> None:
    with client(tmp_path, docs_assets=assets) as http:
        page = http.get("/docs")
        assert page.status_code == 200
        assert re.findall(r'(?:src|href)="([^"]+)"', page.text) == [
            "/docs/assets/swagger-ui.css",
            "data:,",
            "/docs/assets/swagger-ui-bundle.js",
        ]
        assert "http" not in page.text  # nothing from outside the service
        assert "url: '/openapi.json'" in page.text
        js = http.get("/docs/assets/swagger-ui-bundle.js")
        assert js.status_code == 200 and js.content == b"window.SwaggerUIBundle = 1;\n"
        assert http.get("/docs/assets/swagger-ui.css").content == b".swagger-ui {}\n"
        assert http.get("/docs/assets/nope.js").status_code == 404
        assert "/docs" not in http.get("/openapi.json").json()["paths"]


def test_the_favicon_is_used_when_the_folder_has_it(tmp_path: Path, assets: Path) -> None:
    (assets / "favicon-32x32.png").write_bytes(b"\x89PNG")
    with client(tmp_path, docs_assets=assets) as http:
        assert '<link rel="shortcut icon" href="/docs/assets/favicon-32x32.png">' in (
            http.get("/docs").text
        )


def test_a_folder_without_swagger_ui_is_one_line(
    tmp_path: Path, assets: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (assets / "swagger-ui.css").unlink()
    message = (
        f"TUNER_DOCS_ASSETS: {assets} lacks swagger-ui.css (copy the files of the "
        "swagger-ui-dist npm package, version 5 or later, there)"
    )
    with pytest.raises(ValidationError, match=re.escape(message)):
        Settings(docs_assets=assets)
    monkeypatch.setenv("TUNER_DOCS_ASSETS", str(tmp_path / "none"))
    open_store(f"sqlite:///{tmp_path / 't.db'}").dispose()  # serve refuses a missing store
    result = CliRunner().invoke(cli_app, ["serve", "--db", f"sqlite:///{tmp_path / 't.db'}"])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines() == [
        f"error: TUNER_DOCS_ASSETS: {tmp_path / 'none'} is not a folder"
    ]


def test_the_cdn_page_says_what_to_do_offline(tmp_path: Path) -> None:
    with client(tmp_path) as http:
        page = http.get("/docs").text
    hint = page.split('<div id="swagger-ui">', 1)[1].split("</div>", 1)[0]
    assert hint.startswith(
        "<p>If this page stays blank, this browser cannot load Swagger UI from cdn.jsdelivr.net."
    )
    assert "swagger-ui-dist npm package, version 5 or later" in hint
    assert "<code>TUNER_DOCS_ASSETS=/path/to/swagger-ui-dist tuner serve</code>" in hint
    assert '<a href="/openapi.json">/openapi.json</a>' in hint


def test_the_root_is_an_index_of_the_routes(tmp_path: Path) -> None:
    with client(tmp_path) as http:
        response = http.get("/")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/html")
        links = re.findall(r'<a href="([^"]+)">', response.text)
        assert links == ["/docs", "/openapi.json", "/health", "/devices"]
        assert "<code>/devices/{device_name}/report</code>" in response.text
        for link in links:
            assert http.get(link).status_code == 200, link
        assert "/" not in http.get("/openapi.json").json()["paths"]
        assert (
            "<h2>Devices</h2><p>None in the store yet (<code>tuner sweep</code> or "
            "<code>tuner import</code> adds one).</p>"
        ) in response.text


def test_the_root_links_each_devices_report(tmp_path: Path) -> None:
    from tests.storefill import DEFAULT, fill

    db = f"sqlite:///{tmp_path / 't.db'}"
    fill(
        db, {(256, 384, 1): [(DEFAULT, True, "ok", 10.0)]}, device_name="NVIDIA_L20", m_values=(1,)
    )
    fill(
        db, {(256, 384, 1): [(DEFAULT, True, "ok", 10.0)]}, device_name="NVIDIA_H200", m_values=(1,)
    )
    with TestClient(create_app(Settings(db_url=db))) as http:
        page = http.get("/").text
        links = re.findall(r'<a href="(/devices/[^"]+)">', page)
        assert links == ["/devices/NVIDIA_H200/report", "/devices/NVIDIA_L20/report"]
        assert ('<li><a href="/devices/NVIDIA_L20/report">NVIDIA_L20</a>: its report</li>') in page
        assert [http.get(link).status_code for link in links] == [200, 200]


def test_openapi_descriptions_are_for_api_users(tmp_path: Path) -> None:
    """Route docstrings are one line; what users read is in `description=`, not Args:."""
    app = create_app(Settings(db_url=f"sqlite:///{tmp_path / 't.db'}"))
    with TestClient(app) as http:
        paths = http.get("/openapi.json").json()["paths"]
    operations = [(path, method, op) for path, ops in paths.items() for method, op in ops.items()]
    modules = (
        comparisons,
        devices,
        health,
        imports,
        index,
        metrics,
        mounts,
        releases,
        report,
        sweeps,
    )
    # These are every router module, and the schema describes each route of theirs that is in
    # it and nothing else: the checks below cover every operation and every endpoint.
    routers = {info.name for info in pkgutil.iter_modules(api.routes.__path__)}
    assert {module.__name__.rsplit(".", 1)[1] for module in modules} == routers
    routes = [
        route for module in modules for route in module.router.routes if isinstance(route, APIRoute)
    ]
    in_schema = {
        (route.path, method.lower())
        for route in routes
        if route.include_in_schema
        for method in route.methods
    }
    assert in_schema and {(path, method) for path, method, _ in operations} == in_schema
    for path, method, op in operations:
        where = f"{method.upper()} {path}"
        assert op["summary"].strip() and "\n" not in op["summary"], where
        assert op["description"].strip(), where
        for header in ("Args:", "Returns:", "Raises:"):
            assert header not in op["description"], (where, header)
        for parameter in op.get("parameters", []):
            assert parameter.get("description", "").strip(), (where, parameter["name"])
    endpoints = [route.endpoint for route in routes]  # the index page, outside the schema, too
    assert index.router.routes[0].endpoint in endpoints
    for endpoint in endpoints:
        doc = endpoint.__doc__ or ""
        assert doc.strip() and "\n" not in doc, endpoint.__qualname__


def test_the_index_page_stays_up_when_the_store_does_not_answer(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}"  # a folder: SQLite cannot open it
    with TestClient(create_app(Settings(db_url=url)), raise_server_exceptions=False) as test_client:
        response = test_client.get("/")
    assert response.status_code == 200
    assert '<a href="/devices">/devices</a>' in response.text
    assert (
        "<h2>Devices</h2><p>The store does not answer now (OperationalError): try again, "
        "or see /health.</p>"
    ) in response.text
