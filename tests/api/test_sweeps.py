"""POST /sweeps (token-protected) and GET /sweeps/{sweep_id}: codes, bodies, and the same sweep
as `tuner sweep --no-run` creates."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import Settings

TOKEN = "t0ken"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
BODY = {
    "device_name": "NVIDIA_L20",
    "model": "tiny",
    "m_values": [16, 1, 16],
    "strategy": "grid",
    "seed": 7,
}


@pytest.fixture
def url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'tuner.db'}"


@pytest.fixture
def client(url: str) -> Iterator[TestClient]:
    with TestClient(create_app(Settings(db_url=url, api_token=TOKEN))) as test_client:
        yield test_client


def test_create_then_read(client: TestClient) -> None:
    created = client.post("/sweeps", json=BODY, headers=AUTH)
    assert created.status_code == 201, created.text
    body = created.json()
    assert body.pop("created_at")
    assert body == {
        "sweep_id": 1,
        "device_name": "NVIDIA_L20",
        "model": "tiny",
        "tp": 1,
        "strategy": "grid",
        "budget": 1281,
        "space": "vllm",
        "seed": 7,
        "m_values": [1, 16],
        "out_dtype": "bfloat16",
        "block_shape": [128, 128],
        "tasks_total": 4,
        "tasks_pending": 4,
        "tasks_running": 0,
        "tasks_done": 0,
        "tasks_failed": 0,
        "trials_total": 0,
        "trials_ok": 0,
    }
    again = client.post("/sweeps", json=BODY, headers=AUTH)
    assert again.status_code == 200
    assert again.json()["sweep_id"] == 1
    read = client.get("/sweeps/1")
    assert read.status_code == 200
    assert read.json() == again.json()


def test_m_values_default_to_vllms_18_batch_sizes_as_the_cli(
    client: TestClient, url: str, tmp_path
) -> None:
    body = {k: v for k, v in BODY.items() if k != "m_values"}
    created = client.post("/sweeps", json=body, headers=AUTH)
    assert created.status_code == 201, created.text
    grid = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096]
    assert created.json()["m_values"] == grid
    assert created.json()["tasks_total"] == 2 * 18  # tiny's two shapes
    schema = client.get("/openapi.json").json()["components"]["schemas"]["SweepCreate"]
    assert schema["properties"]["m_values"]["default"] == grid
    assert "m_values" not in schema.get("required", [])
    # `tuner sweep --no-run` without --m is the same sweep.
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuner.cli",
            "sweep",
            "--device",
            "L20",
            "--model",
            "tiny",
            "--strategy",
            "grid",
            "--seed",
            "7",
            "--no-run",
            "--db",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()  # the plan first (tuner.run.preview), then the sweep
    assert lines[0] == "plan: NVIDIA_L20, tiny TP 1, grid"
    assert any(
        line.startswith("sweep 1 (resumed): NVIDIA_L20, tiny TP 1, 2 shapes x 18 M")
        for line in lines
    )


def test_the_cli_finds_the_same_sweep(client: TestClient, url: str, tmp_path) -> None:
    body = {**BODY, "strategy": "optuna", "trials": 5}
    assert client.post("/sweeps", json=body, headers=AUTH).status_code == 201
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuner.cli",
            "sweep",
            "--device",
            "L20",
            "--model",
            "tiny",
            "--m",
            "1,16",
            "--strategy",
            "optuna",
            "--trials",
            "5",
            "--seed",
            "7",
            "--no-run",
            "--db",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr
    assert any(
        line.startswith("sweep 1 (resumed): NVIDIA_L20, tiny TP 1, 2 shapes x 2 M")
        for line in run.stdout.splitlines()
    )
    assert "tuner worker --device NVIDIA_L20 --sweep 1" in " ".join(run.stdout.split())


@pytest.mark.parametrize(
    ("headers", "code"),
    [
        ({}, 401),
        ({"Authorization": "Bearer wrong"}, 401),
        ({"Authorization": TOKEN}, 401),
    ],
)
def test_writes_need_the_token(client: TestClient, headers: dict, code: int) -> None:
    response = client.post("/sweeps", json=BODY, headers=headers)
    assert response.status_code == code
    assert "Bearer" in response.json()["detail"]
    assert client.get("/sweeps/1").status_code == 404  # nothing was created


def test_writes_are_off_without_a_token(url: str) -> None:
    with TestClient(create_app(Settings(db_url=url))) as client:
        response = client.post("/sweeps", json=BODY, headers=AUTH)
    assert response.status_code == 403
    assert "TUNER_API_TOKEN" in response.json()["detail"]


@pytest.mark.parametrize(
    ("change", "detail"),
    [
        ({"model": "llama3"}, "unknown model 'llama3'; known: "),
        ({"tp": 3}, "model 'tiny' has no shapes for TP 3; listed: 1"),
        ({"strategy": "random"}, "unknown strategy 'random'; known: grid, optuna"),
    ],
)
def test_unknown_model_or_tp(client: TestClient, change: dict, detail: str) -> None:
    response = client.post("/sweeps", json={**BODY, **change}, headers=AUTH)
    assert response.status_code == 422
    assert response.json()["detail"].startswith(detail)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"m_values": []}, "m_values"),
        ({"m_values": [0]}, "m_values"),
        ({"m_values": list(range(1, 66))}, "m_values"),
        ({"device_name": "../etc"}, "device_name"),
        ({"device_name": 'quote"d'}, "device_name"),
        ({"model": "../../etc/passwd"}, "model"),
        ({"seed": 2**31}, "seed"),
        ({"trials": 0}, "trials"),
        ({"strategy": "Random!"}, "strategy"),
        ({"out_dtype": "float32"}, "out_dtype"),
        ({"extra": 1}, "extra"),
    ],
)
def test_invalid_bodies_are_422(client: TestClient, change: dict, field: str) -> None:
    response = client.post("/sweeps", json={**BODY, **change}, headers=AUTH)
    assert response.status_code == 422
    assert [error["loc"] for error in response.json()["detail"]][0][:2] == ["body", field]


@pytest.mark.parametrize("spelled", ["H200", "NVIDIA H200", "nvidia_h200", "NVIDIA_H200"])
def test_device_names_resolve_as_the_cli_does(client: TestClient, spelled: str) -> None:
    response = client.post("/sweeps", json={**BODY, "device_name": spelled}, headers=AUTH)
    assert response.status_code == 201, response.text
    assert response.json()["device_name"] == "NVIDIA_H200"


@pytest.mark.parametrize("typo", ["H2OO", "bad name!", "NVIDIA_H2OO"])
def test_a_name_no_gpu_has_is_422_and_creates_nothing(client: TestClient, typo: str) -> None:
    response = client.post("/sweeps", json={**BODY, "device_name": typo}, headers=AUTH)
    assert response.status_code == 422
    assert response.json()["detail"] == (
        f"device_name {typo!r} is not a GPU model name such as L20, H200, NVIDIA H200, "
        "nvidia_h200 or NVIDIA_H100_80GB_HBM3"
    )
    assert client.get("/devices").json() == []


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("/sweeps/1", 404),
        ("/sweeps/0", 422),
        ("/sweeps/-1", 422),
        ("/sweeps/abc", 422),
        ("/sweeps/2147483648", 422),
        ("/sweeps/1.5", 422),
    ],
)
def test_sweep_ids_are_validated(client: TestClient, path: str, code: int) -> None:
    response = client.get(path)
    assert response.status_code == code
    if code == 404:
        assert response.json() == {"detail": "no sweep with id 1"}
