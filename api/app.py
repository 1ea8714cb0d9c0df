"""The FastAPI application factory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

import tuner
from api.deps import StoreHandle
from api.docs import add_docs
from api.errors import add_error_handlers
from api.guard import RequestGuard
from api.metrics import CountDownloads, Metrics
from api.routes import devices, imports, index, mounts, releases, report, sweeps
from api.settings import Settings


def create_app(settings: Settings | None = None) -> FastAPI:
    """The service (`app.state.settings`, `.store`, `.metrics` set); None reads the settings
    from the `TUNER_*` environment. Nothing connects to the store until a request needs it."""
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
    add_docs(app, settings.docs_assets)
    app.state.settings = settings
    app.state.store = store
    app.state.metrics = Metrics(store)
    # Token and Content-Length before any read; every other body counted while it is read.
    app.add_middleware(RequestGuard, settings=settings)
    app.add_middleware(CountDownloads, metrics=app.state.metrics)  # outermost: every status
    for module in (index, devices, releases, sweeps, imports, report, mounts):
        app.include_router(module.router)
    add_error_handlers(app, settings)
    return app
