"""The FastAPI application factory: routers, middleware, `/docs`, and one way of answering
errors as JSON `{"detail": ...}`: HTTP errors and 422s as FastAPI answers them, and every store
fault (busy, unreachable, at another schema) a 503 with Retry-After, never a 500."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from prometheus_client import CollectorRegistry
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeout

import tuner
from api.deps import RequestGuard, StoreHandle
from api.metrics import CountDownloads, StoreCollector
from api.routes import devices, index, mounts, releases, sweeps
from api.settings import Settings
from db.repo import SchemaError


def create_app(settings: Settings | None = None) -> FastAPI:
    """The service (`app.state.settings`, `.store`, `.registry` set); None reads the settings
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
        exception_handlers={SchemaError: store_fault, SQLAlchemyError: store_fault},
    )
    registry = CollectorRegistry()
    registry.register(StoreCollector(store))
    app.state.settings, app.state.store, app.state.registry = settings, store, registry
    app.add_middleware(RequestGuard, settings=settings)
    app.add_middleware(CountDownloads, registry=registry)  # outermost: every status
    for module in (index, devices, releases, sweeps, mounts):
        app.include_router(module.router)
    return app


async def store_fault(request: Request, exc: Exception) -> JSONResponse:
    """A store fault's answer: 503 with a detail naming the store, and Retry-After."""
    store = request.app.state.settings.masked_db_url()
    detail, retry_after = f"store {store} failed ({type(exc).__name__})", 5
    if isinstance(exc, SchemaError):
        detail, retry_after = str(exc), 60
    elif isinstance(exc, PoolTimeout):
        detail, retry_after = f"store {store} is busy: every connection is in use", 1
    elif isinstance(exc, DBAPIError):
        detail = f"store {store} is unavailable ({type(exc.orig or exc).__name__})"
    return JSONResponse({"detail": detail}, 503, {"Retry-After": str(retry_after)})
