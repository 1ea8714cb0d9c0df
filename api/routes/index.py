"""`GET /`: a small index of the service for a person with a browser; touches no store."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

import tuner

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
def index() -> HTMLResponse:
    """Render an HTML page linking the service's main routes."""
    items = "".join(
        f'<li><a href="{path}">{path}</a>: {what}</li>' if "{" not in path
        else f"<li><code>{path}</code>: {what}</li>" for path, what in LINKS)
    return HTMLResponse(
        f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>blockfp8-tuner</title>"
        f"</head><body><h1>blockfp8-tuner {tuner.__version__}</h1><p>Tuned vLLM block-FP8 "
        f"GEMM config files, merged from the store.</p><ul>{items}</ul></body></html>")
