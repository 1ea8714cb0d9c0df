"""The service's own routes: `GET /` (an index for a person with a browser: the routes, and a
link to each device's report), `GET /health` and `GET /metrics`."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel

import tuner
from api.deps import SessionDep, SettingsDep
from api.report import PAGES
from db import repo

router = APIRouter()
LINKS = (  # (path, what it is); {device_name} is for the reader to fill in
    ("/docs", "the routes, to try in the browser (Swagger UI)"),
    ("/openapi.json", "the API description (OpenAPI 3.1)"),
    ("/health", "liveness and version"),
    ("/devices", "devices with their coverage; each has files, releases and a report"),
    ("/devices/{device_name}/report", "a device's HTML report: latency and speedup over M"),
    ("/devices/{device_name}/configs.zip", "a device's latest release: files and a README"),
)


class Health(BaseModel):
    """The service is up; which version and which store (password masked)."""

    status: Literal["ok"] = "ok"
    version: str = tuner.__version__
    store: str


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
def index(session: SessionDep) -> str:
    """An HTML page linking the service's main routes and each device's report."""
    page = PAGES.get_template("index.html")
    names = repo.known_device_names(session)
    return page.render(version=tuner.__version__, links=LINKS, names=names)


@router.get("/health", response_model=Health, tags=["health"])
def read_health(settings: SettingsDep) -> Health:
    """The service is up: status, tuner version and the store URL with any password masked.

    The store is not touched.
    """
    return Health(store=settings.masked_db_url())


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}}},
    tags=["metrics"],
)
def read_metrics(request: Request) -> Response:
    """The app's metrics in Prometheus' text format (the store is read at each scrape).

    `tuner_trials{status}`, `tuner_tasks{state}`, `tuner_sweeps`, `tuner_imports`,
    `tuner_store_up` and `tuner_downloads_total{route,status}`.
    """
    return Response(generate_latest(request.app.state.registry), media_type=CONTENT_TYPE_LATEST)
