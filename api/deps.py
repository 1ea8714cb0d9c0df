"""What the routes share: the store (opened on first use) and a session per request, the write
token (checked from the headers, before any body is read), the device a path names, and the
typed parameters."""

from __future__ import annotations

import hmac
import threading
from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Header, HTTPException, Path, Query, Request
from fastapi.security import HTTPBearer
from pydantic import BaseModel, Field
from sqlalchemy import Engine
from sqlalchemy.orm import Session
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.schemas import MAX_INT32, EngineName
from api.settings import Settings
from db import repo
from tuner.core import DEVICE_ARG_PATTERN, OutDtype
from tuner.files.device import MergeError, StoreFiles, device_files
from tuner.inputs.devices import device_among


class StoreHandle:
    """The app's store, opened once on first use, so that a store at an old schema fails a
    request with 503 (and works again after `tuner db upgrade`) instead of failing start-up.
    Starlette runs sync routes in anyio's 40 threads: the pool holds a connection for each, and
    waiting 10 s for one is a 503 (api.app)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine: Engine | None = None
        self._lock = threading.Lock()

    def open(self) -> Engine:
        """The store, at the expected schema revision (else db.repo.SchemaError)."""
        with self._lock:
            if self.engine is None:
                self.engine = repo.open_store(self.url, pool_size=40, pool_timeout=10.0)
            return self.engine


def get_session(request: Request) -> Iterator[Session]:
    """One transaction per request (db.repo.session_scope)."""
    with repo.session_scope(request.app.state.store.open()) as session:
        yield session


def get_settings(request: Request) -> Settings:
    """The settings the app was created with."""
    return request.app.state.settings


SessionDep = Annotated[Session, Depends(get_session)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
# Documents the token on the write routes; RequestGuard checks it before the route runs.
WriteAccess = Depends(HTTPBearer(auto_error=False, description="`Bearer <TUNER_API_TOKEN>`"))


def write_refusal(settings: Settings, authorization: str | None) -> JSONResponse | None:
    """Why a write may not go on: 403 when the service has no token, 401 when the header is
    missing or its token wrong (compared in constant time); None when the token is right."""
    if settings.api_token is None:
        detail = "writes are disabled: start the service with TUNER_API_TOKEN set to a non-blank"
        return JSONResponse({"detail": f"{detail} token"}, 403)
    scheme, _, token = (authorization or "").partition(" ")
    expected = settings.api_token.get_secret_value().encode()
    if scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), expected):
        return None
    detail = "a valid 'Authorization: Bearer <token>' header is required"
    return JSONResponse({"detail": detail}, 401, {"WWW-Authenticate": "Bearer"})


class RequestGuard:
    """ASGI middleware: 401/403 (`write_refusal`) to a write (any method but GET, HEAD and
    OPTIONS) without the token, then 413 to a `Content-Length` over `max_body_bytes`, both from
    the headers alone; every other body (a chunked one has none) is counted as the app reads it,
    and the read that passes the limit raises `HTTPException(413)`, so the rest is never read.
    FastAPI's own body limit (0.165) is not needed: the service runs on the FastAPI that vLLM
    0.33.0 pins (`fastapi[standard]>=0.133.0,<0.137.0`, its METADATA)."""

    def __init__(self, app: ASGIApp, *, settings: Settings) -> None:
        self.app, self.settings = app, settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Refuse or pass on one ASGI connection."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers, limit = Headers(scope=scope), self.settings.max_body_bytes
        refusal = None
        if scope["method"] not in ("GET", "HEAD", "OPTIONS"):
            refusal = write_refusal(self.settings, headers.get("authorization"))
        length = headers.get("content-length", "0")
        if refusal is None and length.isdigit() and int(length) > limit:
            refusal = JSONResponse({"detail": self.settings.too_large}, 413)
        if refusal is not None:
            await refusal(scope, receive, send)  # answers without reading the body
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > limit:
                raise HTTPException(413, detail=self.settings.too_large)
            return message

        await self.app(scope, counted, send)


DeviceName = Annotated[str, Path(pattern=DEVICE_ARG_PATTERN, description="`NVIDIA_L20` or `L20`.")]


def known_device(session: SessionDep, device_name: DeviceName) -> str:
    """The store's name (swept, imported or released) for the device a path names, as `tuner
    --device` resolves it (tuner.inputs.devices.device_among); a 404 naming the known devices
    otherwise."""
    try:
        return device_among(device_name, repo.known_device_names(session))
    except ValueError as exc:
        raise HTTPException(404, str(exc)) from None


KnownDevice = Annotated[str, Depends(known_device)]
OutDtypeQuery = Annotated[OutDtype | None, Query(description="Only trials of this output dtype.")]
AllowStale = Annotated[bool, Query(description="Also trials of another kernel or Triton.")]
EngineParam = Annotated[EngineName, Query(description="Spell names as vLLM or SGLang.")]
FileName = Annotated[str, Path(description="A config file name (vLLM's or SGLang's).")]
IfNoneMatch = Annotated[str | None, Header(description="Cached ETag(s); a match answers 304.")]
ReleaseNumber = Annotated[int | None, Query(ge=1, le=MAX_INT32, description="Default: the latest.")]


class MergeQuery(BaseModel):
    """The query of a route that merges a device's winners into files on the request."""

    partial: bool | None = Field(None, description="Also shapes with M left.")
    out_dtype: OutDtypeQuery = None
    engine: EngineParam = "vllm"
    allow_stale: AllowStale = False

    def files(self, session: Session, device_name: str, settings: Settings) -> StoreFiles:
        """The device's merged files (partial ones too when `partial`, else as the service is
        set); 409 when the winners cannot be merged (e.g. two output dtypes)."""
        scope = self.model_dump(include={"out_dtype", "allow_stale", "engine"})
        try:
            return device_files(
                session, device_name, allow_partial=self.allows_partial(settings), **scope
            )
        except MergeError as exc:
            raise HTTPException(409, detail=str(exc)) from None

    def allows_partial(self, settings: Settings) -> bool:
        """`partial`, or the service's TUNER_ALLOW_PARTIAL when not given."""
        return settings.allow_partial if self.partial is None else self.partial
