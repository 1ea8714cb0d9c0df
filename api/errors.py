"""One way of answering errors, as JSON `{"detail": ...}`: HTTP errors as raised, 422s short
whatever was sent (an excerpt of each input, at most MAX_ERRORS errors), and every store fault
(busy, unreachable, at another schema) a 503 with Retry-After, never a 500."""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException

from api.settings import Settings
from db.repo import SchemaError

EXCERPT_CHARS = 120  # of an input quoted back in a validation error
MAX_ERRORS = 10  # validation errors listed in one response


def too_large_detail(settings: Settings) -> str:
    """The `detail` of a 413."""
    return f"request body over {settings.max_body_bytes} bytes (the service's TUNER_MAX_BODY_BYTES)"


def excerpt(value: Any) -> Any:
    """An input as a 422 quotes it: itself when its JSON is short, else the first EXCERPT_CHARS
    characters of its text (of its JSON, for a non-string) and its length."""
    text = value if isinstance(value, str) else json.dumps(jsonable_encoder(value), default=str)
    if len(text) <= EXCERPT_CHARS:
        return value
    return f"{text[:EXCERPT_CHARS]}... ({len(text)} characters)"


def short_errors(errors: list[dict[str, Any]]) -> dict[str, Any]:
    """A 422's body: FastAPI's `{"detail": [...]}`, each `input` cut to an excerpt, at most
    MAX_ERRORS errors, and `errors_total` when some were left out."""
    shown = [
        {**error, "input": excerpt(error["input"])} if "input" in error else error
        for error in errors[:MAX_ERRORS]
    ]
    body: dict[str, Any] = {"detail": jsonable_encoder(shown)}
    if len(errors) > MAX_ERRORS:
        body["errors_total"] = len(errors)
    return body


def store_fault(exc: Exception, store: str) -> tuple[str, int]:
    """A store fault's 503 detail and its Retry-After seconds."""
    if isinstance(exc, SchemaError):
        return str(exc), 60
    if isinstance(exc, PoolTimeout):
        return f"store {store} is busy: every connection is in use", 1
    if isinstance(exc, DBAPIError):
        reason = type(exc.orig if exc.orig is not None else exc).__name__
        return f"store {store} is unavailable ({reason})", 5
    return f"store {store} failed ({type(exc).__name__})", 5


def add_error_handlers(app: FastAPI, settings: Settings) -> None:
    """Register the handlers of HTTP errors, request validation and store faults on `app`."""

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        detail = exc.detail
        if exc.status_code == 404 and detail == "Not Found":  # no route matched the path
            detail = f"no route for {request.method} {request.url.path}; the routes are at /docs"
        if exc.status_code == 413:  # RequestGuard's count of a body while it is read
            detail = too_large_detail(settings)
        return JSONResponse({"detail": detail}, exc.status_code, getattr(exc, "headers", None))

    async def invalid(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return JSONResponse(short_errors(list(exc.errors())), 422)

    async def store_error(_request: Request, exc: Exception) -> JSONResponse:
        detail, retry_after = store_fault(exc, settings.masked_db_url())
        return JSONResponse({"detail": detail}, 503, {"Retry-After": str(retry_after)})

    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(RequestValidationError, invalid)
    for fault in (SchemaError, SQLAlchemyError):
        app.add_exception_handler(fault, store_error)
