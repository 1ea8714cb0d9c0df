"""Dependencies and parameters the routes share: settings, the store (opened on first use), a
session, the write token, the device a path names, and the typed query parameters."""

from __future__ import annotations

import hmac
import threading
from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Header, HTTPException, Path, Query, Request
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from api.schemas import MAX_INT32, EngineName
from api.settings import Settings
from db import repo
from db.repo import open_store, session_scope
from tuner.core import DEVICE_ARG_PATTERN, OutDtype
from tuner.inputs.devices import store_device

# Starlette runs sync routes and dependencies in anyio's default thread pool of 40 threads
# (anyio.to_thread.current_default_thread_limiter); one connection per thread, so a request
# never waits for a connection while a thread is free. Waiting longer than POOL_TIMEOUT_S is a
# 503 with Retry-After (api.errors), not a 500.
POOL_SIZE = 40
POOL_TIMEOUT_S = 10.0


class StoreHandle:
    """The app's store (its Engine), opened once on first use, so a store with an old schema fails a
    request with 503 (and works again after `tuner db upgrade`) instead of failing start-up."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._store: Engine | None = None
        self._lock = threading.Lock()

    def open(self) -> Engine:
        """The store, at the expected schema revision (else db.repo.SchemaError)."""
        with self._lock:
            if self._store is None:
                self._store = open_store(self.url, pool_size=POOL_SIZE, pool_timeout=POOL_TIMEOUT_S)
            return self._store

    def dispose(self) -> None:
        """Close the store's connections, if it was opened."""
        with self._lock:
            if self._store is not None:
                self._store.dispose()
                self._store = None


def get_settings(request: Request) -> Settings:
    """The settings the app was created with."""
    return request.app.state.settings


def get_store(request: Request) -> Engine:
    """The store (its Engine), whose handle is kept on `app.state.store`."""
    return request.app.state.store.open()


SettingsDep = Annotated[Settings, Depends(get_settings)]
StoreDep = Annotated[Engine, Depends(get_store)]


def get_session(store: StoreDep) -> Iterator[Session]:
    """One transaction per request (db.repo.session_scope)."""
    with session_scope(store) as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session)]


def write_refusal(settings: Settings, authorization: str | None) -> HTTPException | None:
    """Why a write may not go on: 403 when the service has no token, 401 when the header is
    missing or its token wrong (compared in constant time); None when the token is right."""
    if settings.api_token is None:
        return HTTPException(
            403,
            detail="writes are disabled: start the service with "
            "TUNER_API_TOKEN set to a non-blank token",
        )
    scheme, _, token = (authorization or "").partition(" ")
    expected = settings.api_token.get_secret_value().encode()
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), expected):
        return HTTPException(
            401,
            detail="a valid 'Authorization: Bearer <token>' header is required",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return None


def require_token(
    settings: SettingsDep,
    authorization: Annotated[str | None, Header(description="`Bearer <TUNER_API_TOKEN>`")] = None,
) -> None:
    """Guard of every write route (api.guard.RequestGuard refuses the same requests before
    their body is read; this keeps each write route safe on its own and documents the header)."""
    refusal = write_refusal(settings, authorization)
    if refusal is not None:
        raise refusal


WriteAccess = Annotated[None, Depends(require_token)]

DeviceName = Annotated[
    str,
    Path(
        pattern=DEVICE_ARG_PATTERN,
        description="vLLM's device key, e.g. `NVIDIA_L20`; `L20` and `NVIDIA L20` name it too.",
    ),
]


def device_in(device_name: str, known: list[str]) -> str:
    """The one name among `known` that a path's device names, as `tuner --device` resolves it
    (tuner.inputs.devices.store_device); a 404 naming the known devices otherwise."""
    try:
        return store_device(device_name, known)
    except ValueError as exc:
        raise HTTPException(404, detail=str(exc)) from None


def known_device(device_name: DeviceName, session: SessionDep) -> str:
    """The store's name (swept or imported) for the device a path names."""
    return device_in(device_name, repo.known_device_names(session))


KnownDevice = Annotated[str, Depends(known_device)]
OutDtypeQuery = Annotated[
    OutDtype | None,
    Query(description="Only trials timed with this output dtype; needed when a device has both."),
]
Partial = Annotated[
    bool | None,
    Query(
        description="Also serve shapes whose M grid has M without a winner "
        "(default: the service's TUNER_ALLOW_PARTIAL).",
    ),
]
AllowStale = Annotated[
    bool,
    Query(
        description="Also use trials timed with another kernel source or another Triton "
        "major.minor than the current ones (see `current` in GET /devices).",
    ),
]
EngineParam = Annotated[
    EngineName,
    Query(
        description="File-name spelling: vLLM's `block_shape=[128,128]` or SGLang's "
        "`block_shape=[128, 128]`. The configs are tuned on vLLM's kernel either way.",
    ),
]
FileName = Annotated[
    str, Path(description="A config file name in vLLM's or SGLang's spelling (`configs` lists).")
]
IfNoneMatch = Annotated[
    str | None, Header(description="The client's cached ETag(s); a match answers 304.")
]
ReleaseNumber = Annotated[
    int | None,
    Query(
        ge=1,
        le=MAX_INT32,
        description="A release number (`GET /devices/{d}/releases`); default: the latest.",
    ),
]
