"""One store the read-only route tests share (filled once per session), and a client on it.

NVIDIA_L20 has two shapes over M = 1, 16, 32, timed in three environments: the current kernel
and Triton (`cur`), an old kernel and an old Triton (both stale); one `tuner compare` run timed
vLLM's Triton kernel. H200 has stale trials only.
Release 1 of L20 is published from the current trials."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import Settings
from db import repo
from db.connection import open_store, session_scope
from tests.db.conftest import claim_all, decide, decision, retime, trials
from tests.storefill import DEFAULT, FAST, SLOW, SPEC, TRITON, publish
from tuner.files.provenance import current_kernel_hash
from tuner.kernels.dense.family import config_file_name

DEVICE = "NVIDIA_L20"
SHAPE_A, SHAPE_B = (5120, 3072), (7168, 5120)
FILE_A, FILE_B = config_file_name(*SHAPE_A, DEVICE), config_file_name(*SHAPE_B, DEVICE)
MID = {**FAST, "BLOCK_SIZE_N": 128}
ENVIRONMENTS = {  # name -> (kernel_hash, triton)
    "cur": (current_kernel_hash(), TRITON),
    "old_kernel": ("0ld", TRITON),
    "old_triton": (current_kernel_hash(), "3.5.0"),
}
KEPT_NOTE = "FAST leads MID by only 0.20 us <= spread 0.80 us; kept the simpler"
# (device, N, K, M) -> trials in the order recorded: (environment, config, is_default, status, us)
PLAN = {
    # A, M=1: a stale trial (old kernel) is the fastest; the current winner is FAST.
    (DEVICE, *SHAPE_A, 1): [
        ("cur", DEFAULT, True, "ok", 10.0),
        ("cur", FAST, False, "ok", 8.0),
        ("old_kernel", SLOW, False, "ok", 4.0),
    ],
    # A, M=16: SLOW ties the default and was stored first; the merge emits the default.
    (DEVICE, *SHAPE_A, 16): [("cur", SLOW, False, "ok", 10.0), ("cur", DEFAULT, True, "ok", 10.0)],
    # A, M=32: re-timing kept MID (the decision below), though FAST timed faster once.
    (DEVICE, *SHAPE_A, 32): [
        ("cur", DEFAULT, True, "ok", 20.0),
        ("cur", FAST, False, "ok", 14.0),
        ("cur", MID, False, "ok", 14.5),
        ("cur", SLOW, False, "out_of_resources", None),
    ],
    # B, M=1 current; M=16 only trials of Triton 3.5 (stale); M=32 no winner: B is partial.
    (DEVICE, *SHAPE_B, 1): [("cur", DEFAULT, True, "ok", 6.0), ("cur", FAST, False, "ok", 5.0)],
    (DEVICE, *SHAPE_B, 16): [
        ("old_triton", DEFAULT, True, "ok", 9.0),
        ("old_triton", SLOW, False, "ok", 7.0),
    ],
    (DEVICE, *SHAPE_B, 32): [("cur", FAST, False, "wrong_result", None)],
    # H200: every trial is of an old kernel, so nothing is current.
    ("NVIDIA_H200", *SHAPE_A, 1): [
        ("old_kernel", DEFAULT, True, "ok", 3.0),
        ("old_kernel", FAST, False, "ok", 2.0),
    ],
}


VERDICTS = ["decode (M <= 32): triton-tuned is fastest over 1 point(s)", "prefill: no point"]
POINTS = [
    repo.PointRow(*SHAPE_A, 1, "triton-tuned", "ok", 5.0, 4.5, 5.5, "16x64 g1"),
    repo.PointRow(*SHAPE_A, 1, "triton-default", "ok", 10.0, 9.0, 11.0, "default"),
    repo.PointRow(*SHAPE_A, 1, "vllm-marlin", "unavailable", None, None, None, "not wired"),
]
RETIMES = [retime(MID, 14.4), retime(FAST, 14.6), retime(DEFAULT, 19.0, is_default=True)]
DECIDED = decision(MID, 14.4, 19.0, runner_up=FAST, spread_us=0.8, kept="simpler", note=KEPT_NOTE)
ENV = {"compute_capability": "8.9", "driver": "580", "cuda": "12.9", "torch": "2.11.0"}
ENV |= {"tuner": "0.1.0"}


def _environment(session, device: str, kernel_hash: str, triton: str, **more: str) -> int:
    name = {"device_name": device, "gpu_name": device.replace("_", " ")}
    return repo.get_or_create_environment(
        session, **name, **ENV, triton=triton, kernel_hash=kernel_hash, **more
    )


def _comparison(session) -> None:
    vllm_env = _environment(session, DEVICE, "abc", TRITON, kernel_source="vllm", vllm="0.33.0")
    run = {"model": "tiny", "tp": 1, "out_dtype": "bfloat16", "verdicts": VERDICTS}
    repo.record_comparison(
        session, device_name=DEVICE, environment_id=vllm_env, points=POINTS, **run
    )


def fill(url: str) -> None:
    """Record PLAN's trials, the decision of (A, 32), L20's comparison, then
    publish L20's release 1."""
    engine = open_store(url)
    with session_scope(engine) as session:
        for device in (DEVICE, "NVIDIA_H200"):
            planned = [key[1:] for key in PLAN if key[0] == device]
            spec = replace(SPEC, device_name=device, shapes=sorted({(n, k) for n, k, _ in planned}))
            spec = replace(spec, m_values=sorted({m for _, _, m in planned}))
            sweep_id = repo.create_sweep(session, spec)[0].sweep_id
            env = {name: _environment(session, device, *v) for name, v in ENVIRONMENTS.items()}
            if device == DEVICE:
                _comparison(session)
            tasks = claim_all(session, sweep_id).items()
            for (n, k, m), task_id in [(key, t) for key, t in tasks if isinstance(key, tuple)]:
                for name, config, is_default, status, us in PLAN[(device, n, k, m)]:
                    trials(session, task_id, env[name], [(config, is_default, us, status)])
                if (device, n, k, m) == (DEVICE, *SHAPE_A, 32):
                    assert decide(session, task_id, env["cur"], RETIMES, DECIDED)
                repo.finish_task(session, task_id=task_id, worker_id="w")
    engine.dispose()
    publish(url, DEVICE)


@pytest.fixture(scope="session")
def store_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('store') / 'tuner.db'}"
    fill(url)
    return url


@pytest.fixture
def client(store_url: str) -> Iterator[TestClient]:
    with TestClient(create_app(Settings(db_url=store_url))) as test_client:
        yield test_client
