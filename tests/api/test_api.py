"""The HTTP API on a temporary SQLite store filled through db.repo: exact JSON, bytes and codes."""

from __future__ import annotations

import hashlib
import importlib.metadata
import io
import sqlite3
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import Response
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

import tuner
from api.app import create_app
from api.routes import devices, health, releases
from api.settings import Settings
from db import repo
from db.connection import open_store, session_scope
from tests.storefill import DENSE_SWEEP, publish
from tuner.files.format import dump_config_file
from tuner.files.provenance import current_kernel_hash, installed_triton_minor
from tuner.kernels.dense.naming import config_file_name
from tuner.kernels.dense.space import default_config

DEVICE = "NVIDIA_L20"
# Trials as this machine would time them: the current kernel source and Triton.
TRITON = importlib.metadata.version("triton")
DEFAULT = default_config().as_dict()
FAST = {
    "BLOCK_SIZE_M": 16,
    "BLOCK_SIZE_N": 64,
    "BLOCK_SIZE_K": 128,
    "GROUP_SIZE_M": 1,
    "num_warps": 4,
    "num_stages": 3,
}
SLOW = {
    "BLOCK_SIZE_M": 128,
    "BLOCK_SIZE_N": 256,
    "BLOCK_SIZE_K": 128,
    "GROUP_SIZE_M": 64,
    "num_warps": 8,
    "num_stages": 5,
}
SHAPE_A, SHAPE_B = (5120, 3072), (7168, 5120)
FILE_A = config_file_name(*SHAPE_A, DEVICE)
FILE_B = config_file_name(*SHAPE_B, DEVICE)
# (N, K, M) -> trials in the order recorded: (config, is_default, status, latency_us).
PLAN = {
    (*SHAPE_A, 1): [(DEFAULT, True, "ok", 10.0), (FAST, False, "ok", 6.0)],
    # SLOW ties the default and was stored first: the store ranks it first (lowest trial_id),
    # and the merge must emit the default instead, since SLOW is not faster.
    (*SHAPE_A, 16): [(SLOW, False, "ok", 10.0), (DEFAULT, True, "ok", 10.0)],
    (*SHAPE_A, 32): [
        (DEFAULT, True, "ok", 10.0),
        (FAST, False, "ok", 9.0),
        (SLOW, False, "out_of_resources", None),
    ],
    (*SHAPE_B, 1): [(DEFAULT, True, "ok", 6.0), (FAST, False, "ok", 5.0)],
    (*SHAPE_B, 16): [(DEFAULT, True, "ok", 6.0), (SLOW, False, "ok", 8.0)],
    (*SHAPE_B, 32): [(FAST, False, "wrong_result", None)],  # no winner: shape B is partial
}
EXPECTED_A = {1: FAST, 16: DEFAULT, 32: FAST}
EXPECTED_B = {1: FAST, 16: DEFAULT}


def _fill(url: str) -> None:
    engine = open_store(url)
    try:
        with session_scope(engine) as session:
            sweep, _ = repo.create_sweep(
                session,
                device_name=DEVICE,
                model="test-model",
                tp=2,
                strategy="grid",
                budget=8,
                space="vllm",
                seed=0,
                m_values=[1, 16, 32],
                out_dtype="bfloat16",
                block_shape=(128, 128),
                shapes=[SHAPE_A, SHAPE_B],
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
                shapes=[(256, 512)],
                **DENSE_SWEEP,
            )
            environment_id = repo.get_or_create_environment(
                session,
                device_name=DEVICE,
                gpu_name="NVIDIA L20",
                compute_capability="8.9",
                driver="",
                cuda="",
                torch="",
                triton=TRITON,
                tuner=tuner.__version__,
                kernel_hash=current_kernel_hash(),
            )
        while True:
            with session_scope(engine) as session:
                task = repo.claim_task(session, sweep_id=sweep.sweep_id, worker_id="w", lease_s=60)
                if task is None:
                    break
                for config, is_default, status, latency_us in PLAN[(task.N, task.K, task.M)]:
                    repo.record_trial(
                        session,
                        task_id=task.task_id,
                        environment_id=environment_id,
                        config=config,
                        is_default=is_default,
                        status=status,
                        latency_us=latency_us,
                    )
                repo.finish_task(session, task_id=task.task_id, worker_id="w")
    finally:
        engine.dispose()
    publish(url, DEVICE)  # release 1: what the file and zip routes serve


@pytest.fixture(scope="module")
def store_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('store') / 'tuner.db'}"
    _fill(url)
    return url


@pytest.fixture
def client(store_url: str) -> Iterator[TestClient]:
    with TestClient(create_app(Settings(db_url=store_url))) as test_client:
        yield test_client


def test_health(client: TestClient, store_url: str) -> None:
    response = client.get("/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "version": tuner.__version__, "store": store_url}


def test_health_masks_the_password() -> None:
    settings = Settings(db_url="postgresql+psycopg://tuner:s3cret@db.example/tuner")
    with TestClient(create_app(settings)) as test_client:
        store = test_client.get("/health").json()["store"]
    assert store == "postgresql+psycopg://tuner:***@db.example/tuner"


def test_devices(client: TestClient) -> None:
    shape = {"block_shape": [128, 128], "m_requested": [1, 16, 32], "m_stale": []}
    current = {"kernel_hash": current_kernel_hash(), "triton_minor": installed_triton_minor()}
    assert client.get("/devices").json() == [
        {
            "device_name": DEVICE,
            "shapes": [
                {
                    "N": 5120,
                    "K": 3072,
                    **shape,
                    "m_covered": [1, 16, 32],
                    "complete": True,
                    "file_name": FILE_A,
                },
                {
                    "N": 7168,
                    "K": 5120,
                    **shape,
                    "m_covered": [1, 16],
                    "complete": False,
                    "file_name": FILE_B,
                },
            ],
            "current": current,
            "tuned_with": [
                {
                    "gpu_name": "NVIDIA L20",
                    "compute_capability": "8.9",
                    "driver": "",
                    "cuda": "",
                    "torch": "",
                    "triton": TRITON,
                    "tuner": tuner.__version__,
                    "kernel_hash": current_kernel_hash(),
                    "trials": 12,
                    "winners": 5,
                    "current": True,
                },
            ],
            "imported": [],
            "note": None,
        },
        {
            "device_name": "TRITON_INTERPRETER",
            "shapes": [
                {
                    "N": 256,
                    "K": 512,
                    "block_shape": [128, 128],
                    "m_requested": [1],
                    "m_covered": [],
                    "complete": False,
                    "m_stale": [],
                    "file_name": config_file_name(256, 512, "TRITON_INTERPRETER"),
                },
            ],
            "current": current,
            "tuned_with": [],
            "imported": [],
            "note": None,
        },
    ]


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


MISSING_WARNINGS = [
    "M=2048 is not in the file: vLLM will use the M=32 entry",
    "M=4096 is not in the file: vLLM will use the M=32 entry",
]


def test_configs_skip_partial_shapes(client: TestClient) -> None:
    body = client.get(f"/devices/{DEVICE}/configs").json()
    assert body == {
        "device_name": DEVICE,
        "files": [
            {
                "file_name": FILE_A,
                "N": 5120,
                "K": 3072,
                "block_shape": [128, 128],
                "sha256": _sha(dump_config_file(EXPECTED_A)),
                "m_keys": [1, 16, 32],
                "partial": False,
                "m_missing": [],
                "notes": [
                    "M=16: best config 128x256x128 g64 w8 s5 (10.00 us) is not faster than "
                    "the default (10.00 us); emitting the default config"
                ],
                "warnings": MISSING_WARNINGS,
                "m_imported": [],
            }
        ],
        "skipped": [
            {
                "N": 7168,
                "K": 5120,
                "block_shape": [128, 128],
                "reason": "no winner yet for M=32",
                "m_missing": [32],
            }
        ],
        "engine": "vllm",
        "engine_note": None,
        "release": 1,
    }


def test_configs_with_partial(client: TestClient) -> None:
    body = client.get(f"/devices/{DEVICE}/preview/configs", params={"partial": "true"}).json()
    assert [f["file_name"] for f in body["files"]] == [FILE_A, FILE_B]
    partial = body["files"][1]
    assert (partial["partial"], partial["m_missing"], partial["m_keys"]) == (True, [32], [1, 16])
    assert partial["notes"] == ["M=16: the default config was fastest"]
    assert partial["sha256"] == _sha(dump_config_file(EXPECTED_B))
    assert body["skipped"] == []


def test_file_is_exact_bytes_with_etag(client: TestClient) -> None:
    response = client.get(f"/devices/{DEVICE}/configs/{FILE_A}")
    assert response.status_code == 200
    assert response.content == dump_config_file(EXPECTED_A).encode()
    assert response.headers["content-type"] == "application/json"
    assert response.headers["etag"] == f'"{hashlib.sha256(response.content).hexdigest()}"'
    assert response.headers["content-disposition"] == f'attachment; filename="{FILE_A}"'

    etag = response.headers["etag"]
    for header in (etag, f"W/{etag}", f'"x", {etag}', "*"):
        cached = client.get(
            f"/devices/{DEVICE}/configs/{FILE_A}", headers={"If-None-Match": header}
        )
        assert cached.status_code == 304 and cached.content == b""
        assert cached.headers["etag"] == etag
    stale = client.get(f"/devices/{DEVICE}/configs/{FILE_A}", headers={"If-None-Match": '"x"'})
    assert stale.status_code == 200 and stale.content == response.content


def test_sglang_spelling_serves_the_vllm_file(client: TestClient) -> None:
    sglang = FILE_A.replace("[128,128]", "[128, 128]")
    response = client.get(f"/devices/{DEVICE}/configs/{sglang}")
    assert response.status_code == 200
    assert response.content == dump_config_file(EXPECTED_A).encode()
    assert response.headers["content-disposition"] == f'attachment; filename="{FILE_A}"'


def test_partial_file_only_on_request(client: TestClient) -> None:
    refused = client.get(f"/devices/{DEVICE}/configs/{FILE_B}")
    assert refused.status_code == 404
    assert refused.json()["detail"] == (
        f"no file {FILE_B!r} in {DEVICE} release 1: no winner yet for M=32; "
        f"/devices/{DEVICE}/preview/configs/{FILE_B}?partial=true merges what there is"
    )
    preview = client.get(f"/devices/{DEVICE}/preview/configs/{FILE_B}")
    assert preview.json()["detail"] == (
        f"no file {FILE_B!r} yet: no winner yet for M=32; ?partial=true serves what there is"
    )
    served = client.get(f"/devices/{DEVICE}/preview/configs/{FILE_B}", params={"partial": "true"})
    assert served.status_code == 200
    assert served.content == dump_config_file(EXPECTED_B).encode()


def test_allow_partial_setting_is_the_default(store_url: str) -> None:
    settings = Settings(db_url=store_url, allow_partial=True)
    with TestClient(create_app(settings)) as test_client:
        assert test_client.get(f"/devices/{DEVICE}/preview/configs/{FILE_B}").status_code == 200
        off = test_client.get(
            f"/devices/{DEVICE}/preview/configs/{FILE_B}", params={"partial": "false"}
        )
        assert off.status_code == 404


def test_zip(client: TestClient) -> None:
    response = client.get(f"/devices/{DEVICE}/configs.zip")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/zip"
    assert response.headers["content-disposition"] == (
        f'attachment; filename="{DEVICE}-configs.zip"'
    )
    assert response.headers["etag"] == f'"{hashlib.sha256(response.content).hexdigest()}"'
    with zipfile.ZipFile(io.BytesIO(response.content)) as archive:
        assert archive.namelist() == [FILE_A, "README.txt"]
        assert archive.read(FILE_A) == dump_config_file(EXPECTED_A).encode()
        assert {info.date_time for info in archive.infolist()} == {(1980, 1, 1, 0, 0, 0)}
        readme = archive.read("README.txt").decode()
    for fact in (
        "vllm/model_executor/layers/quantization/utils/configs/",
        "VLLM_TUNED_CONFIG_FOLDER does not apply",
        "--linear-backend triton",
        ":ro",
        f"sha256 {_sha(dump_config_file(EXPECTED_A))}",
        MISSING_WARNINGS[0],
        "N=7168, K=5120, block_shape=[128,128]: no winner yet for M=32",
    ):
        assert fact in readme
    assert client.get(f"/devices/{DEVICE}/configs.zip").content == response.content
    with_partial = client.get(f"/devices/{DEVICE}/preview/configs.zip", params={"partial": "true"})
    with zipfile.ZipFile(io.BytesIO(with_partial.content)) as archive:
        assert archive.namelist() == [FILE_A, FILE_B, "README.txt"]
    cached = client.get(
        f"/devices/{DEVICE}/configs.zip", headers={"If-None-Match": response.headers["etag"]}
    )
    assert cached.status_code == 304


KNOWN = "known: NVIDIA_L20, TRITON_INTERPRETER"


@pytest.mark.parametrize(
    "path",
    [
        "/devices/NVIDIA_H100/configs",
        "/devices/NVIDIA_H100/configs.zip",
        f"/devices/NVIDIA_H100/configs/{config_file_name(*SHAPE_A, 'NVIDIA_H100')}",
    ],
)
def test_unknown_device_is_404_naming_the_known(client: TestClient, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 404
    assert response.json() == {"detail": f"unknown device 'NVIDIA_H100'; {KNOWN}"}


def test_unknown_file_is_404(client: TestClient) -> None:
    name = config_file_name(1024, 1024, DEVICE)
    response = client.get(f"/devices/{DEVICE}/configs/{name}")
    assert response.status_code == 404
    assert response.json() == {"detail": f"no file {name!r} in {DEVICE} release 1; files: {FILE_A}"}
    other = config_file_name(*SHAPE_A, "TRITON_INTERPRETER")
    response = client.get(f"/devices/{DEVICE}/configs/{other}")
    assert response.status_code == 404
    assert response.json() == {
        "detail": f"{other!r} names device 'TRITON_INTERPRETER', not {DEVICE!r}"
    }


def test_device_without_winners(client: TestClient) -> None:
    unpublished = client.get("/devices/TRITON_INTERPRETER/configs")
    assert unpublished.status_code == 404
    assert unpublished.json()["detail"] == (
        "TRITON_INTERPRETER has no release yet: `tuner publish --device TRITON_INTERPRETER` "
        "makes one; /devices/TRITON_INTERPRETER/preview/configs shows what it would contain"
    )
    body = client.get("/devices/TRITON_INTERPRETER/preview/configs").json()
    assert body["files"] == []
    assert body["skipped"] == [
        {
            "N": 256,
            "K": 512,
            "block_shape": [128, 128],
            "reason": "no M has a winner: nothing to write",
            "m_missing": [1],
        }
    ]


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/devices/bad%20name/configs", 404),  # unknown: "bad name" matches no device
        ("/devices/bad%2Fname/configs", 404),  # no route
        ("/devices/" + "x" * 129 + "/configs", 422),
        ("/devices/bad%3Bname/configs", 404),  # ';' may be in vLLM's key: unknown, not invalid
        ("/devices/bad%22name/configs", 422),  # '"' never is
        ("/devices/bad%5Cname/configs", 422),  # nor '\\'
        ("/devices/bad%09name/configs", 422),  # nor a tab
        (f"/devices/{DEVICE}/configs/passwd", 404),
        (f"/devices/{DEVICE}/configs/{FILE_A}.bak", 404),
        (f"/devices/{DEVICE}/configs/..%2F..%2Fetc%2Fpasswd", 404),
        (f"/devices/{DEVICE}/configs/%2E%2E", 404),
        ("/devices/%2E%2E/configs", 404),  # the client resolves it to /configs
    ],
)
def test_bad_names_are_4xx(client: TestClient, path: str, status: int) -> None:
    response = client.get(path)
    assert response.status_code == status
    assert response.json()["detail"]


def test_bad_file_name_detail_lists_the_files(client: TestClient) -> None:
    response = client.get(f"/devices/{DEVICE}/configs/passwd")
    detail = response.json()["detail"]
    assert detail.startswith("'passwd' is not a config file name like")
    assert detail.endswith(f"; files: {FILE_A}")


def test_unmatched_route_names_itself(client: TestClient) -> None:
    response = client.get("/devices/bad%2Fname/configs")
    assert response.json() == {
        "detail": "no route for GET /devices/bad/name/configs; the routes are at /docs"
    }


@pytest.mark.parametrize("alias", ["L20", "NVIDIA%20L20", "nvidia_l20"])
def test_device_aliases_resolve_like_the_cli(client: TestClient, alias: str) -> None:
    listed = client.get(f"/devices/{alias}/configs")
    assert listed.status_code == 200
    assert listed.json()["device_name"] == DEVICE
    assert client.get(f"/devices/{alias}/configs/{FILE_A}").status_code == 200


def test_old_schema_is_503(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE sweeps (sweep_id INTEGER PRIMARY KEY)")
    with TestClient(create_app(Settings(db_url=f"sqlite:///{path}"))) as test_client:
        response = test_client.get("/devices")
        assert response.status_code == 503
        assert "tuner db upgrade" in response.json()["detail"]
        assert test_client.get("/health").status_code == 200


def test_unreachable_store_is_503(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}"  # a folder: SQLite cannot open it
    with TestClient(create_app(Settings(db_url=url)), raise_server_exceptions=False) as test_client:
        response = test_client.get(f"/devices/{DEVICE}/configs")
    assert response.status_code == 503
    assert response.json() == {"detail": f"store {url} is unavailable (OperationalError)"}


def test_settings_from_environment(monkeypatch: pytest.MonkeyPatch, store_url: str) -> None:
    monkeypatch.setenv("TUNER_DB_URL", store_url)
    monkeypatch.setenv("TUNER_ALLOW_PARTIAL", "true")
    monkeypatch.setenv("TUNER_PORT", "8123")
    settings = Settings()
    assert (settings.db_url, settings.allow_partial, settings.port) == (store_url, True, 8123)
    assert settings.host == "127.0.0.1"
    with TestClient(create_app()) as test_client:
        preview = test_client.get(f"/devices/{DEVICE}/preview/configs/{FILE_B}")
        assert preview.status_code == 200


def test_every_route_declares_its_response() -> None:
    routes = {
        route.path: route
        for router in (health.router, devices.router, releases.router)
        for route in router.routes
        if isinstance(route, APIRoute)
    }
    assert {
        "/devices",
        "/devices/{device_name}/configs",
        "/devices/{device_name}/configs.zip",
        "/devices/{device_name}/configs/{file_name}",
        "/devices/{device_name}/preview/configs",
        "/devices/{device_name}/preview/configs.zip",
        "/devices/{device_name}/preview/configs/{file_name}",
        "/devices/{device_name}/releases",
        "/health",
    } <= set(routes)
    for path, route in routes.items():  # these and any route the three routers gain
        raw = route.response_class is Response and "configs" in path
        assert route.response_model is not None or raw, path


def test_api_imports_no_torch_or_triton() -> None:
    code = "import api.app, sys; assert 'torch' not in sys.modules and 'triton' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
