"""The FastAPI application factory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException

import tuner
from api.deps import StoreHandle
from api.docs import add_cdn_docs, add_local_docs
from api.errors import validation_error
from api.guard import RequestGuard, too_large_detail
from api.metrics import CountDownloads, Metrics
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
from db.repo import SchemaError


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the service. Nothing connects to the store until the first request needs it.

    Args:
        settings: The settings; None reads them from the `TUNER_*` environment.

    Returns:
        The app, with `app.state.settings`, `app.state.store` and `app.state.metrics` set.
    """
    settings = settings if settings is not None else Settings()
    store = StoreHandle(settings.db_url)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        store.dispose()

    app = FastAPI(
        title="blockfp8-tuner",
        version=tuner.__version__,
        summary="Tuned vLLM block-FP8 GEMM config files, merged from the store.",
        lifespan=lifespan,
        docs_url=None,
    )
    if settings.docs_assets:
        add_local_docs(app, settings.docs_assets)
    else:
        add_cdn_docs(app)
    app.state.settings = settings
    app.state.store = store
    app.state.metrics = Metrics(store)
    # Token and Content-Length before any read; every other body counted while it is read.
    app.add_middleware(RequestGuard, settings=settings)
    app.add_middleware(CountDownloads, metrics=app.state.metrics)  # outermost: every status
    _include_routers(app)
    _add_error_handlers(app, settings)
    return app


def _include_routers(app: FastAPI) -> None:
    """Mount every route module's router on `app`."""
    for router in (
        index.router,
        health.router,
        devices.router,
        releases.router,
        sweeps.router,
        imports.router,
        report.router,
        comparisons.router,
        mounts.router,
        metrics.router,
    ):
        app.include_router(router)


def _add_error_handlers(app: FastAPI, settings: Settings) -> None:
    """Register the JSON error responses: HTTP errors, request validation, and a store that is
    busy, unreachable or at another schema (a 503 with Retry-After, never a 500).
    """

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        detail = exc.detail
        if exc.status_code == 404 and detail == "Not Found":  # no route matched the path
            detail = f"no route for {request.method} {request.url.path}; the routes are at /docs"
        if exc.status_code == 413:  # RequestGuard's count of a body while it is read
            detail = too_large_detail(settings)
        return JSONResponse(
            status_code=exc.status_code,
            content={"detail": detail},
            headers=getattr(exc, "headers", None),
        )

    # Starlette types a handler as taking any Exception; this one is registered for its class only.
    app.add_exception_handler(RequestValidationError, validation_error)  # type: ignore[arg-type]

    # A store that is busy, unreachable or at another schema is a 503 the client may retry,
    # never a 500.
    @app.exception_handler(SchemaError)
    async def schema_error(_request: Request, exc: SchemaError) -> JSONResponse:
        return JSONResponse(
            status_code=503, content={"detail": str(exc)}, headers={"Retry-After": "60"}
        )

    @app.exception_handler(PoolTimeout)
    async def pool_busy(_request: Request, _exc: PoolTimeout) -> JSONResponse:
        detail = f"store {settings.masked_db_url()} is busy: every connection is in use"
        return JSONResponse(
            status_code=503, content={"detail": detail}, headers={"Retry-After": "1"}
        )

    @app.exception_handler(DBAPIError)
    async def store_error(_request: Request, exc: DBAPIError) -> JSONResponse:
        reason = type(exc.orig).__name__ if exc.orig is not None else type(exc).__name__
        detail = f"store {settings.masked_db_url()} is unavailable ({reason})"
        return JSONResponse(
            status_code=503, content={"detail": detail}, headers={"Retry-After": "5"}
        )

    @app.exception_handler(SQLAlchemyError)
    async def other_store_error(_request: Request, exc: SQLAlchemyError) -> JSONResponse:
        detail = f"store {settings.masked_db_url()} failed ({type(exc).__name__})"
        return JSONResponse(
            status_code=503, content={"detail": detail}, headers={"Retry-After": "5"}
        )
