"""The FastAPI application factory: routers, middleware, `/docs`, and one way of answering
errors as JSON `{"detail": ...}`: HTTP errors as raised, 422s short whatever was sent, and every
store fault (busy, unreachable, at another schema) a 503 with Retry-After, never a 500."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException

import tuner
from api.deps import RequestGuard, StoreHandle
from api.metrics import CountDownloads, Metrics
from api.routes import devices, imports, index, mounts, releases, report, sweeps
from api.settings import Settings
from db.repo import SchemaError

EXCERPT_CHARS, MAX_ERRORS = 120, 10  # of an input quoted back in a 422; errors listed in one
# Shown until Swagger UI draws /docs: so where the CDN cannot be reached.
OFFLINE_HINT = (
    "<p>If this page stays blank, this browser cannot load Swagger UI from cdn.jsdelivr.net. "
    'The API description is at <a href="/openapi.json">/openapi.json</a> (open it in any '
    'OpenAPI 3.1 viewer); the index is at <a href="/">/</a>. For this page offline, copy the '
    "files of the swagger-ui-dist npm package, version 5 or later (Swagger UI 4 cannot render "
    "OpenAPI 3.1), to the server and start it with "
    "<code>TUNER_DOCS_ASSETS=/path/to/swagger-ui-dist tuner serve</code>.</p>"
)


def create_app(settings: Settings | None = None) -> FastAPI:
    """The service (`app.state.settings`, `.store`, `.metrics` set); None reads the settings
    from the `TUNER_*` environment. Nothing connects to the store until a request needs it."""
    settings = settings if settings is not None else Settings()
    store = StoreHandle(settings.db_url)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        if store.engine is not None:
            store.engine.dispose()

    app = FastAPI(
        title="blockfp8-tuner",
        version=tuner.__version__,
        summary="Tuned vLLM block-FP8 GEMM config files, merged from the store.",
        lifespan=lifespan,
        docs_url=None,
    )
    app.state.settings, app.state.store, app.state.metrics = settings, store, Metrics(store)
    app.add_middleware(RequestGuard, settings=settings)
    app.add_middleware(CountDownloads, metrics=app.state.metrics)  # outermost: every status
    for module in (index, devices, releases, sweeps, imports, report, mounts):
        app.include_router(module.router)
    _add_docs(app, settings)
    _add_error_handlers(app, settings)
    return app


def _add_docs(app: FastAPI, settings: Settings) -> None:
    """`/docs`: with Swagger UI's files from TUNER_DOCS_ASSETS under /docs/assets, or FastAPI's
    CDN page with OFFLINE_HINT where Swagger UI draws (no installed package ships the files)."""
    folder, urls = settings.docs_assets, dict[str, Any]()
    if folder is not None:
        app.mount("/docs/assets", StaticFiles(directory=folder), name="docs-assets")
        favicon = (folder / "favicon-32x32.png").is_file()
        urls = {
            "swagger_js_url": "/docs/assets/swagger-ui-bundle.js",
            "swagger_css_url": "/docs/assets/swagger-ui.css",
            "swagger_favicon_url": "/docs/assets/favicon-32x32.png" if favicon else "data:,",
        }

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        title = f"{app.title} - Swagger UI"
        page = get_swagger_ui_html(openapi_url="/openapi.json", title=title, **urls)
        if folder is not None:
            return page
        swagger = '<div id="swagger-ui">'
        return HTMLResponse(bytes(page.body).decode().replace(swagger, swagger + OFFLINE_HINT, 1))


def excerpt(value: Any) -> Any:
    """An input as a 422 quotes it: itself when its JSON is short, else the first EXCERPT_CHARS
    characters of its text (of its JSON, for a non-string) and its length."""
    text = value if isinstance(value, str) else json.dumps(jsonable_encoder(value), default=str)
    if len(text) <= EXCERPT_CHARS:
        return value
    return f"{text[:EXCERPT_CHARS]}... ({len(text)} characters)"


def store_fault(exc: Exception, store: str) -> tuple[str, int]:
    """A store fault's 503 detail and its Retry-After seconds."""
    if isinstance(exc, SchemaError):
        return str(exc), 60
    if isinstance(exc, PoolTimeout):
        return f"store {store} is busy: every connection is in use", 1
    if isinstance(exc, DBAPIError):
        return f"store {store} is unavailable ({type(exc.orig or exc).__name__})", 5
    return f"store {store} failed ({type(exc).__name__})", 5


def _add_error_handlers(app: FastAPI, settings: Settings) -> None:
    """HTTP errors, request validation (inputs quoted by `excerpt`, at most MAX_ERRORS errors
    and `errors_total` counting them all) and store faults."""

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        detail = exc.detail
        if exc.status_code == 404 and detail == "Not Found":  # no route matched the path
            detail = f"no route for {request.method} {request.url.path}; the routes are at /docs"
        return JSONResponse({"detail": detail}, exc.status_code, getattr(exc, "headers", None))

    async def invalid(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        errors = exc.errors()
        shown = [{**e, "input": excerpt(e["input"])} if "input" in e else e for e in errors[:10]]
        body: dict[str, Any] = {"detail": jsonable_encoder(shown)}
        if len(errors) > MAX_ERRORS:
            body["errors_total"] = len(errors)
        return JSONResponse(body, 422)

    async def store_error(_request: Request, exc: Exception) -> JSONResponse:
        detail, retry_after = store_fault(exc, settings.masked_db_url())
        return JSONResponse({"detail": detail}, 503, {"Retry-After": str(retry_after)})

    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(RequestValidationError, invalid)
    for fault in (SchemaError, SQLAlchemyError):
        app.add_exception_handler(fault, store_error)
