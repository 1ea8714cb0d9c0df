"""ASGI middleware that refuses, from its headers alone, a write request without the service's
token and a body announced over the size limit, so neither makes the service read a body; and
counts every other body while it is read, cutting it off at the limit."""

from __future__ import annotations

from fastapi import HTTPException
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.deps import write_refusal
from api.errors import too_large_detail
from api.settings import Settings

# Methods that only read. Every other method is a write, and every write route of the service
# needs the token (tests/api/test_api_hostile.py checks that each one declares it).
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class RequestGuard:
    """Answer before the app runs: 401/403 (`api.deps.write_refusal`) to a write request that
    lacks the token, then 413 to one whose `Content-Length` is over `max_body_bytes`. Every
    other body (a chunked one has no `Content-Length`) is counted as the app reads it: the read
    that takes it past `max_body_bytes` raises FastAPI's `HTTPException(413)`, so the rest is
    never read and the app's handler answers it (`api.app`). This needs no body limit of
    FastAPI's own (`include_router(max_body_size=...)`, FastAPI 0.165), so the service runs with
    the FastAPI that vLLM 0.33.0 pins (`fastapi[standard]>=0.133.0,<0.137.0`, its METADATA).

    Args:
        app: The application to guard.
        settings: The service's settings (its token and body limit).
    """

    def __init__(self, app: ASGIApp, *, settings: Settings) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Refuse or pass on one ASGI connection."""
        if scope["type"] == "http":
            response = self._refusal(scope)
            if response is not None:
                await response(scope, receive, send)  # answers without reading the body
                return
            receive = _counted(receive, self.settings)
        await self.app(scope, receive, send)

    def _refusal(self, scope: Scope) -> JSONResponse | None:
        headers = Headers(scope=scope)
        if scope["method"] not in SAFE_METHODS:
            refused = write_refusal(self.settings, headers.get("authorization"))
            if refused is not None:
                return JSONResponse(
                    {"detail": refused.detail},
                    status_code=refused.status_code,
                    headers=refused.headers,
                )
        if _length(headers) > self.settings.max_body_bytes:
            return JSONResponse({"detail": too_large_detail(self.settings)}, status_code=413)
        return None


def _counted(receive: Receive, settings: Settings) -> Receive:
    """`receive` that adds up the body bytes read so far and raises `HTTPException(413)` (the
    app's handler answers it with `too_large_detail`) on the message that takes them past
    `settings.max_body_bytes`; nothing after that message is read."""
    seen = 0

    async def counted() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > settings.max_body_bytes:
                raise HTTPException(413, detail=too_large_detail(settings))
        return message

    return counted


def _length(headers: Headers) -> int:
    """The announced body length; 0 when none or unreadable (h11 refuses a malformed one)."""
    try:
        return int(headers.get("content-length", "0"))
    except ValueError:
        return 0
