"""`/docs` without a CDN: Swagger UI's files served from a local folder (`TUNER_DOCS_ASSETS`).

FastAPI's `/docs` and `/redoc` pages load their JavaScript and CSS from cdn.jsdelivr.net, so on
a host without internet access they stay blank; `/openapi.json` is served by the app itself.
FastAPI's documented remedy ("Custom Docs UI Static Assets", fastapi.tiangolo.com/how-to/
custom-docs-ui-assets/) is to serve those files from the app: no installed package ships them,
so the folder comes from the user (the `swagger-ui-dist` npm package's files, version 5 or
later: the app's schema is OpenAPI 3.1, which Swagger UI 4, as in the `swagger-ui` package on
PyPI, cannot render). Without the folder `/docs` is FastAPI's CDN page with a note inside the
element Swagger UI draws into: a browser that reaches the CDN replaces it, one that does not
shows what to do.
"""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

# The files of the swagger-ui-dist package the page needs (the favicon is optional).
REQUIRED_ASSETS: tuple[str, ...] = ("swagger-ui-bundle.js", "swagger-ui.css")
ASSETS_PATH = "/docs/assets"


def check_docs_assets(folder: Path) -> Path:
    """A folder holding Swagger UI's files.

    Args:
        folder: where swagger-ui-bundle.js and swagger-ui.css are.

    Returns:
        The folder, absolute.

    Raises:
        ValueError: one line: the folder does not exist or lacks one of `REQUIRED_ASSETS`.
    """
    folder = folder.expanduser().absolute()
    if not folder.is_dir():
        raise ValueError(f"TUNER_DOCS_ASSETS: {folder} is not a folder")
    missing = [name for name in REQUIRED_ASSETS if not (folder / name).is_file()]
    if missing:
        raise ValueError(
            f"TUNER_DOCS_ASSETS: {folder} lacks {', '.join(missing)} (copy the "
            "files of the swagger-ui-dist npm package, version 5 or later, there)"
        )
    return folder


# Shown until Swagger UI draws the page: so where the CDN cannot be reached.
OFFLINE_HINT = (
    "<p>If this page stays blank, this browser cannot load Swagger UI from cdn.jsdelivr.net. "
    'The API description is served here at <a href="{openapi}">{openapi}</a> (open it in '
    'any OpenAPI 3.1 viewer); the index is at <a href="/">/</a>. For this page offline, '
    "copy the files of the swagger-ui-dist npm package, version 5 or later (Swagger UI 4 "
    "cannot render OpenAPI 3.1), to the server and start it with "
    "<code>TUNER_DOCS_ASSETS=/path/to/swagger-ui-dist tuner serve</code>.</p>"
)


def add_docs(app: FastAPI, folder: Path | None) -> None:
    """Serve `/docs` (the app must be built with `docs_url=None`): with Swagger UI's files from
    `folder` (one `check_docs_assets` accepted) under `ASSETS_PATH`, or without one as FastAPI's
    CDN page with `OFFLINE_HINT` where Swagger UI draws."""
    openapi = app.openapi_url or "/openapi.json"
    urls: dict[str, Any] = {}
    if folder is not None:
        app.mount(ASSETS_PATH, StaticFiles(directory=folder), name="docs-assets")
        favicon = (folder / "favicon-32x32.png").is_file()
        urls = {
            "swagger_js_url": f"{ASSETS_PATH}/swagger-ui-bundle.js",
            "swagger_css_url": f"{ASSETS_PATH}/swagger-ui.css",
            "swagger_favicon_url": f"{ASSETS_PATH}/favicon-32x32.png" if favicon else "data:,",
        }

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        page = get_swagger_ui_html(openapi_url=openapi, title=f"{app.title} - Swagger UI", **urls)
        if folder is not None:
            return page
        hint = OFFLINE_HINT.format(openapi=escape(openapi))
        swagger = '<div id="swagger-ui">'
        return HTMLResponse(bytes(page.body).decode().replace(swagger, swagger + hint, 1))
