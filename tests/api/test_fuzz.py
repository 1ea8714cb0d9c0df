"""Schemathesis fuzzes every operation of the OpenAPI schema (the writes with and without a valid
token), valid and invalid inputs, a bounded number of examples each: no request may get a 5xx."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from api.app import create_app
from api.settings import Settings
from tests.storefill import DEFAULT, FAST, fill, publish

TOKEN = "fuzz-token"
EXAMPLES = 4  # per operation, token mode and generation mode


def fuzz(operation, mode, headers: dict, codes: Counter, errors: list[str]) -> None:
    """EXAMPLES generated requests to one operation; count status codes, keep any 5xx. An
    operation with nothing to get wrong (no parameters, no body) has no negative cases."""

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def call(case):
        response = case.call(headers=headers)
        codes[response.status_code] += 1
        if response.status_code >= 500:
            errors.append(f"{response.status_code} {response.request.url}: {response.text[:200]}")

    try:
        call()
    except Unsatisfiable:
        assert mode is GenerationMode.NEGATIVE and not (
            operation.path_parameters or operation.query or operation.body
        ), operation.label


def test_no_request_gets_a_5xx(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    plan = {
        (256, 384, m): [(DEFAULT, True, "ok", 10.0 + m), (FAST, False, "ok", 5.0)] for m in (1, 16)
    }
    fill(url, plan, m_values=(1, 16))
    publish(url)
    schema = schemathesis.openapi.from_asgi(
        "/openapi.json", create_app(Settings(db_url=url, api_token=TOKEN))
    )
    codes: Counter[int] = Counter()
    errors: list[str] = []
    for result in schema.get_all_operations():
        operation, token = result.ok(), {"Authorization": f"Bearer {TOKEN}"}
        # Only a write reads the token (api.deps.RequestGuard): a read is fuzzed once.
        for headers in (token, {}) if operation.method.upper() == "POST" else (token,):
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                fuzz(operation, mode, headers, codes, errors)
    assert errors == []
    assert {200, 401, 404, 422} <= set(codes)  # valid, refused, unknown, invalid
