"""Error bodies that stay short whatever was sent: validation errors quote an excerpt of the
input, never all of it, and list only the first few errors."""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

EXCERPT_CHARS = 120  # of an input quoted back in a validation error
MAX_ERRORS = 10  # validation errors listed in one response


def excerpt(value: Any) -> Any:
    """An input as a validation error may quote it: unchanged when its JSON is short, else the
    first EXCERPT_CHARS characters of its text (of its JSON, for a non-string) and its length.

    Args:
        value: The offending input (any JSON-able value).

    Returns:
        The value itself, or a string like `'aaaa... (50000000 characters)'`.
    """
    text = value if isinstance(value, str) else json.dumps(jsonable_encoder(value), default=str)
    if len(text) <= EXCERPT_CHARS:
        return value
    return f"{text[:EXCERPT_CHARS]}... ({len(text)} characters)"


def short_errors(errors: list[dict[str, Any]]) -> dict[str, Any]:
    """The body of a 422: FastAPI's `{"detail": [...]}` with each `input` cut to an excerpt, at
    most MAX_ERRORS errors, and `errors_total` when some were left out.

    Args:
        errors: `RequestValidationError.errors()`.

    Returns:
        A JSON-able dict.
    """
    shown = [
        {**error, "input": excerpt(error["input"])} if "input" in error else error
        for error in errors[:MAX_ERRORS]
    ]
    body: dict[str, Any] = {"detail": jsonable_encoder(shown)}
    if len(errors) > MAX_ERRORS:
        body["errors_total"] = len(errors)
    return body


async def validation_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
    """FastAPI's 422 for a request that fails validation, with `short_errors`' body."""
    return JSONResponse(status_code=422, content=short_errors(list(exc.errors())))
