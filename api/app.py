"""The FastAPI application factory: routers, middleware, `/docs`, and one way of answering
errors as JSON `{"detail": ...}`: HTTP errors as raised (FastAPI's own handler), 422s short
whatever was sent, and every store fault (busy, unreachable, at another schema) a 503 with
Retry-After, never a 500."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeout

import tuner
from api.deps import RequestGuard, StoreHandle
from api.metrics import CountDownloads, Metrics
from api.routes import devices, index, mounts, releases, sweeps
from api.settings import Settings
from db.repo import SchemaError

EXCERPT_CHARS, MAX_ERRORS = 120, 10  # of an input quoted back in a 422; errors listed in one


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
    )
    app.state.settings, app.state.store, app.state.metrics = settings, store, Metrics(store)
    app.add_middleware(RequestGuard, settings=settings)
    app.add_middleware(CountDownloads, metrics=app.state.metrics)  # outermost: every status
    for module in (index, devices, releases, sweeps, mounts):
        app.include_router(module.router)
    _add_error_handlers(app, settings)
    return app


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
    """Request validation (inputs quoted by `excerpt`, at most MAX_ERRORS errors
    and `errors_total` counting them all) and store faults."""

    async def invalid(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        errors = exc.errors()
        shown = [
            {**e, "input": excerpt(e["input"])} if "input" in e else e for e in errors[:MAX_ERRORS]
        ]
        body: dict[str, Any] = {"detail": jsonable_encoder(shown)}
        if len(errors) > MAX_ERRORS:
            body["errors_total"] = len(errors)
        return JSONResponse(body, 422)

    async def store_error(_request: Request, exc: Exception) -> JSONResponse:
        detail, retry_after = store_fault(exc, settings.masked_db_url())
        return JSONResponse({"detail": detail}, 503, {"Retry-After": str(retry_after)})

    app.add_exception_handler(RequestValidationError, invalid)
    for fault in (SchemaError, SQLAlchemyError):
        app.add_exception_handler(fault, store_error)
