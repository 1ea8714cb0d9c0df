"""The HTTP API serves winners of the current kernel and Triton only, unless ?allow_stale=true;
GET /devices says which versions the files were tuned with; decided configs win."""

from __future__ import annotations

import importlib.metadata
import io
import zipfile
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

import tuner.files.device
from api.app import create_app
from api.settings import Settings
from db import repo
from db.connection import open_store, session_scope
from tests.storefill import DENSE_SWEEP
from tuner.files.format import dump_config_file
from tuner.files.provenance import current_kernel_hash, installed_triton_minor
from tuner.kernels.dense.naming import config_file_name
from tuner.kernels.dense.space import default_config

DEVICE = "NVIDIA_L20"
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
MID = {**FAST, "BLOCK_SIZE_N": 128}
SHAPE_A, SHAPE_B = (5120, 3072), (7168, 5120)
FILE_A = config_file_name(*SHAPE_A, DEVICE)
FILE_B = config_file_name(*SHAPE_B, DEVICE)
TRITON = importlib.metadata.version("triton")
ENVIRONMENTS = {  # name -> (kernel_hash, triton)
    "current": (current_kernel_hash(), TRITON),
    "old_kernel": ("0ld", TRITON),
    "old_triton": (current_kernel_hash(), "3.5.0"),
}
# (N, K, M) -> trials: (environment, config, is_default, latency_us), all ok.
PLAN = {
    # A, M=1: a stale trial (old kernel) is the fastest; current winner FAST.
    (*SHAPE_A, 1): [
        ("current", DEFAULT, True, 10.0),
        ("current", FAST, False, 8.0),
        ("old_kernel", SLOW, False, 4.0),
    ],
    # A, M=16: the re-timing kept MID (decision below), though FAST timed faster once.
    (*SHAPE_A, 16): [
        ("current", DEFAULT, True, 20.0),
        ("current", FAST, False, 14.0),
        ("current", MID, False, 14.5),
    ],
    # B, M=1: current; B, M=16: only trials of Triton 3.5: stale, so B is partial.
    (*SHAPE_B, 1): [("current", DEFAULT, True, 6.0), ("current", FAST, False, 5.0)],
    (*SHAPE_B, 16): [("old_triton", DEFAULT, True, 9.0), ("old_triton", SLOW, False, 7.0)],
}


def _retime(config: dict, latency_us: float, is_default: bool = False) -> dict:
    return {
        "config": config,
        "is_default": is_default,
        "rounds": 7,
        "latency_us": latency_us,
        "p20_us": latency_us - 0.25,
        "p80_us": latency_us + 0.25,
    }


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
                m_values=[1, 16],
                out_dtype="bfloat16",
                block_shape=(128, 128),
                shapes=[SHAPE_A, SHAPE_B],
                **DENSE_SWEEP,
            )
            env = {
                name: repo.get_or_create_environment(
                    session,
                    device_name=DEVICE,
                    gpu_name="NVIDIA L20",
                    compute_capability="8.9",
                    driver="580",
                    cuda="12.9",
                    torch="2.11.0",
                    triton=triton,
                    tuner="0.1.0",
                    kernel_hash=kernel_hash,
                )
                for name, (kernel_hash, triton) in ENVIRONMENTS.items()
            }
            while (
                task := repo.claim_task(session, sweep_id=sweep.sweep_id, worker_id="w", lease_s=60)
            ) is not None:
                for name, config, is_default, latency_us in PLAN[(task.N, task.K, task.M)]:
                    repo.record_trial(
                        session,
                        task_id=task.task_id,
                        environment_id=env[name],
                        config=config,
                        is_default=is_default,
                        status="ok",
                        latency_us=latency_us,
                    )
                if (task.N, task.K, task.M) == (*SHAPE_A, 16):
                    assert repo.record_decision(
                        session,
                        task_id=task.task_id,
                        worker_id="w",
                        environment_id=env["current"],
                        retimes=[
                            _retime(MID, 14.4),
                            _retime(FAST, 14.6),
                            _retime(DEFAULT, 19.0, True),
                        ],
                        decision={
                            "config": MID,
                            "latency_us": 14.4,
                            "default_latency_us": 19.0,
                            "runner_up": FAST,
                            "spread_us": 0.5,
                            "kept": "simpler",
                            "note": "FAST within the spread of MID",
                        },
                    )
                repo.finish_task(session, task_id=task.task_id, worker_id="w")
    finally:
        engine.dispose()


@pytest.fixture(scope="module")
def store_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('store') / 'tuner.db'}"
    _fill(url)
    return url


@pytest.fixture
def client(store_url: str) -> Iterator[TestClient]:
    with TestClient(create_app(Settings(db_url=store_url))) as test_client:
        yield test_client


def _tuned_with(kernel_hash: str, triton: str, trials: int, winners: int, current: bool) -> dict:
    return {
        "gpu_name": "NVIDIA L20",
        "compute_capability": "8.9",
        "driver": "580",
        "cuda": "12.9",
        "torch": "2.11.0",
        "triton": triton,
        "tuner": "0.1.0",
        "kernel_hash": kernel_hash,
        "trials": trials,
        "winners": winners,
        "current": current,
    }


def test_devices_say_what_the_files_were_tuned_with(client: TestClient) -> None:
    (device,) = client.get("/devices").json()
    assert device["current"] == {
        "kernel_hash": current_kernel_hash(),
        "triton_minor": installed_triton_minor(),
    }
    assert device["tuned_with"] == [
        _tuned_with(current_kernel_hash(), TRITON, 7, 3, True),
        _tuned_with(current_kernel_hash(), "3.5.0", 2, 0, False),
        _tuned_with("0ld", TRITON, 1, 0, False),
    ]
    assert [(s["N"], s["m_covered"], s["m_stale"], s["complete"]) for s in device["shapes"]] == [
        (5120, [1, 16], [], True),
        (7168, [1], [16], False),
    ]
    (stale,) = client.get("/devices", params={"allow_stale": "true"}).json()
    assert [(t["triton"], t["kernel_hash"], t["winners"]) for t in stale["tuned_with"]] == [
        (TRITON, current_kernel_hash(), 2),
        ("3.5.0", current_kernel_hash(), 1),
        (TRITON, "0ld", 1),
    ]
    assert [(s["m_covered"], s["m_stale"]) for s in stale["shapes"]] == [
        ([1, 16], []),
        ([1, 16], []),
    ]


def test_current_file_follows_the_decision_not_the_stale_trial(client: TestClient) -> None:
    response = client.get(f"/devices/L20/preview/configs/{FILE_A}")
    assert response.status_code == 200
    assert response.text == dump_config_file({1: FAST, 16: MID})
    stale = client.get(f"/devices/L20/preview/configs/{FILE_A}", params={"allow_stale": "true"})
    assert stale.text == dump_config_file({1: SLOW, 16: MID})
    assert stale.headers["etag"] != response.headers["etag"]


def test_a_shape_made_partial_by_stale_trials_says_so(client: TestClient) -> None:
    listed = client.get("/devices/L20/preview/configs").json()
    assert [f["file_name"] for f in listed["files"]] == [FILE_A]
    assert listed["skipped"] == [
        {
            "N": 7168,
            "K": 5120,
            "block_shape": [128, 128],
            "m_missing": [16],
            "reason": "no winner yet for M=16; M=16 only have trials of another kernel or Triton "
            "(?allow_stale=true uses them)",
        }
    ]
    missing = client.get(f"/devices/L20/preview/configs/{FILE_B}")
    assert missing.status_code == 404
    assert missing.json()["detail"] == (
        f"no file {FILE_B!r} yet: no winner yet for M=16; ?partial=true serves what there is; "
        "M=16 only have trials of another kernel or Triton (?allow_stale=true uses them)"
    )
    stale = client.get(f"/devices/L20/preview/configs/{FILE_B}", params={"allow_stale": "true"})
    assert stale.status_code == 200
    assert stale.text == dump_config_file({1: FAST, 16: SLOW})


def test_zip_allow_stale(client: TestClient) -> None:
    def names(params: dict) -> list[str]:
        response = client.get("/devices/L20/preview/configs.zip", params=params)
        assert response.status_code == 200
        with zipfile.ZipFile(io.BytesIO(response.content)) as archive:
            return sorted(n for n in archive.namelist() if n.endswith(".json"))

    assert names({}) == [FILE_A]
    assert names({"allow_stale": "true"}) == [FILE_A, FILE_B]
    refused = client.get("/devices/L20/preview/configs.zip", params={"allow_stale": "maybe"})
    assert refused.status_code == 422


def test_without_triton_the_newest_tuned_triton_is_current(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tuner.files.device, "installed_triton_minor", lambda: None)
    (device,) = client.get("/devices").json()
    newest = max(("3.5", installed_triton_minor()), key=lambda v: tuple(map(int, v.split("."))))
    assert device["current"]["triton_minor"] == newest
    assert [t["current"] for t in device["tuned_with"]] == [newest != "3.5", newest == "3.5", False]
