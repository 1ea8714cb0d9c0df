"""`GET /`: a small index of the service for a person with a browser: its routes, and a link to
each device's report (the store's device names, swept or imported)."""

from __future__ import annotations

from html import escape
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from sqlalchemy.exc import SQLAlchemyError

import tuner
from db import repo
from db.repo import SchemaError, session_scope

router = APIRouter(tags=["index"])

# (path, what it is); {device_name} is for the reader to fill in.
LINKS: tuple[tuple[str, str], ...] = (
    ("/docs", "the routes, to try in the browser (Swagger UI)"),
    ("/openapi.json", "the API description (OpenAPI 3.1)"),
    ("/health", "liveness and version"),
    ("/devices", "devices with their coverage; each has files, releases and a report"),
    ("/devices/{device_name}/report", "a device's HTML report: latency and speedup over M"),
    ("/devices/{device_name}/configs.zip", "a device's latest release: files and a README"),
)


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
def index(request: Request) -> HTMLResponse:
    """Render an HTML page linking the service's main routes and each device's report."""
    items = "".join(
        f'<li><a href="{path}">{path}</a>: {what}</li>'
        if "{" not in path
        else f"<li><code>{path}</code>: {what}</li>"
        for path, what in LINKS
    )
    try:  # the store is opened here, not as a dependency, so that its fault spares the page
        with session_scope(request.app.state.store.open()) as session:
            names = repo.known_device_names(session)
    except (SQLAlchemyError, SchemaError) as exc:  # the routes still show; /devices says 503
        return _page(
            items,
            "<h2>Devices</h2><p>The store does not answer now "
            f"({escape(type(exc).__name__)}): try again, or see /health.</p>",
        )
    # Device names are vLLM's keys (db.work: printable ASCII without space, quote, slash or
    # backslash), escaped all the same; quote() keeps them one path segment.
    devices = "".join(
        f'<li><a href="/devices/{quote(name, safe="")}/report">{escape(name)}</a>: its report</li>'
        for name in names
    )
    listed = (
        f"<h2>Devices</h2><ul>{devices}</ul>"
        if names
        else "<h2>Devices</h2><p>None in the store yet (<code>tuner sweep</code> or "
        "<code>tuner import</code> adds one).</p>"
    )
    return _page(items, listed)


def _page(items: str, listed: str) -> HTMLResponse:
    return HTMLResponse(
        f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>blockfp8-tuner</title>'
        f"</head><body><h1>blockfp8-tuner {tuner.__version__}</h1><p>Tuned vLLM block-FP8 "
        f"GEMM config files, merged from the store.</p><ul>{items}</ul>{listed}</body></html>"
    )
