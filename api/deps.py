"""Dependencies of the routes: settings, the store (opened on first use) and a session."""

from __future__ import annotations

import hmac
import threading
from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Header, HTTPException, Request
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from api.settings import Settings
from db.repo import open_store, session_scope

# Starlette runs sync routes and dependencies in anyio's default thread pool of 40 threads
# (anyio.to_thread.current_default_thread_limiter); one connection per thread, so a request
# never waits for a connection while a thread is free. Waiting longer than POOL_TIMEOUT_S is a
# 503 with Retry-After (api.app), not a 500.
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
        """The store (its Engine), at the expected schema revision; opened on the first call.

        Raises:
            db.repo.SchemaError: The store's schema is not the one this tuner expects.
        """
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
    """One read transaction per request (db.repo.session_scope)."""
    with session_scope(store) as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session)]


def write_refusal(settings: Settings, authorization: str | None) -> HTTPException | None:
    """Why a write request may not go on, or None when it carries the service's token.

    Args:
        settings: The service's settings (`api_token`).
        authorization: The request's Authorization header, if any.

    Returns:
        403 when the service has no token (writes disabled), 401 when the header is missing or
        the token is wrong (compared in constant time); None when the token is right.
    """
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
    """Guard of every write endpoint: the request must carry the service's bearer token.

    `api.guard.RequestGuard` refuses the same requests before their body is read; this
    dependency keeps each write route safe on its own and documents the header.

    Raises:
        HTTPException: as `write_refusal` returns it.
    """
    refusal = write_refusal(settings, authorization)
    if refusal is not None:
        raise refusal


WriteAccess = Annotated[None, Depends(require_token)]
