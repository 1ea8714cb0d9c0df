"""Schemathesis fuzzes every operation of the OpenAPI schema, with and without a valid token,
valid and invalid inputs: no request may get a 5xx."""

from __future__ import annotations

from collections import Counter

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

import tuner
from api.app import create_app
from api.settings import Settings
from db import repo
from db.connection import open_store, session_scope
from tests.storefill import DENSE_SWEEP
from tuner.kernels.dense.space import default_config

TOKEN = "fuzz-token"
EXAMPLES = 36  # per operation, token mode and generation mode
MIN_REQUESTS = 1000


def fill(url: str) -> None:
    """A finished sweep on NVIDIA_L20 (two shapes, two M) and an unstarted one."""
    engine = open_store(url)
    try:
        with session_scope(engine) as session:
            sweep, _ = repo.create_sweep(
                session,
                device_name="NVIDIA_L20",
                model="tiny",
                tp=1,
                strategy="grid",
                budget=2,
                space="vllm",
                seed=0,
                m_values=[1, 16],
                out_dtype="bfloat16",
                block_shape=(128, 128),
                shapes=[(256, 384), (576, 256)],
                **DENSE_SWEEP,
            )
            repo.create_sweep(
                session,
                device_name="TRITON_INTERPRETER",
                model="tiny",
                tp=1,
                strategy="grid",
                budget=2,
                space="vllm",
                seed=0,
                m_values=[1],
                out_dtype="bfloat16",
                block_shape=(128, 128),
                shapes=[(256, 384)],
                **DENSE_SWEEP,
            )
            environment_id = repo.get_or_create_environment(
                session,
                device_name="NVIDIA_L20",
                gpu_name="NVIDIA L20",
                compute_capability="8.9",
                driver="",
                cuda="",
                torch="",
                triton="",
                tuner=tuner.__version__,
                kernel_hash="fuzz",
            )
            while task := repo.claim_task(
                session, sweep_id=sweep.sweep_id, worker_id="w", lease_s=60
            ):
                repo.record_trial(
                    session,
                    task_id=task.task_id,
                    environment_id=environment_id,
                    config=default_config().as_dict(),
                    is_default=True,
                    status="ok",
                    latency_us=10.0 + task.M,
                )
                repo.finish_task(session, task_id=task.task_id, worker_id="w")
    finally:
        engine.dispose()


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('fuzz') / 'tuner.db'}"
    fill(url)
    return create_app(Settings(db_url=url, api_token=TOKEN))


def fuzz(operation, mode, headers: dict, codes: Counter, errors: list[str]) -> None:
    """EXAMPLES generated requests to one operation; count status codes, keep any 5xx.

    An operation with nothing to get wrong (no parameters, no body) has no negative cases.
    """

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
            errors.append(
                f"{response.status_code} {case.method} {response.request.url}: "
                f"{response.text[:200]}"
            )

    try:
        call()
    except Unsatisfiable:
        assert (
            mode is GenerationMode.NEGATIVE
            and not operation.path_parameters
            and (not operation.query and not operation.body)
        ), operation.label


def test_no_request_gets_a_5xx(app):
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    operations = [result.ok() for result in schema.get_all_operations()]
    labels = sorted(operation.label for operation in operations)
    assert "POST /sweeps" in labels and "GET /sweeps/{sweep_id}" in labels
    codes: Counter[int] = Counter()
    errors: list[str] = []
    for operation in operations:
        for headers in ({"Authorization": f"Bearer {TOKEN}"}, {}):
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                fuzz(operation, mode, headers, codes, errors)
    total = sum(codes.values())
    print(f"{total} requests over {len(labels)} operations; status codes {sorted(codes.items())}")
    assert errors == []
    assert total >= MIN_REQUESTS
    assert {200, 201, 401, 404, 422} <= set(codes)  # valid, created, refused, unknown, invalid
