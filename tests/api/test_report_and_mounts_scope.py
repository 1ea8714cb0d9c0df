"""Mounts and the HTML report use the same provenance filter as the file routes (current kernel
and Triton unless ?allow_stale=true); the report says which versions it shows and how a decided
winner was kept; a default kept within the re-timing's noise is noted as such."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.report import ReportRow, ShapeReport, render_report
from api.settings import Settings
from db import repo
from db.connection import open_store, session_scope
from tests.storefill import DENSE_SWEEP
from tuner.files.provenance import current_kernel_hash, installed_triton_minor
from tuner.kernels.dense.naming import config_file_name
from tuner.kernels.dense.space import default_config
from tuner.kernels.shape import FamilyShape, Shape

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
SHAPE_A, SHAPE_B = (5120, 3072), (7168, 5120)
FILE_A = config_file_name(*SHAPE_A, DEVICE)
FILE_B = config_file_name(*SHAPE_B, DEVICE)
TRITON = importlib.metadata.version("triton")
ENVIRONMENTS = {  # name -> (kernel_hash, triton)
    "current": (current_kernel_hash(), TRITON),
    "old_kernel": ("0ld", TRITON),
    "old_triton": (current_kernel_hash(), "3.5.0"),
}
# (device, N, K, M) -> trials: (environment, config, is_default, latency_us), all ok.
PLAN = {
    # A, M=1: a stale trial (old kernel) is the fastest; the current winner is FAST.
    (DEVICE, *SHAPE_A, 1): [
        ("current", DEFAULT, True, 10.0),
        ("current", FAST, False, 8.0),
        ("old_kernel", SLOW, False, 4.0),
    ],
    # A, M=16: FAST timed faster once; re-timing kept the default (within the spread).
    (DEVICE, *SHAPE_A, 16): [("current", DEFAULT, True, 20.0), ("current", FAST, False, 19.0)],
    # B, M=1: current; B, M=16: trials of Triton 3.5 only: stale, so B is partial.
    (DEVICE, *SHAPE_B, 1): [("current", DEFAULT, True, 6.0), ("current", FAST, False, 5.0)],
    (DEVICE, *SHAPE_B, 16): [("old_triton", DEFAULT, True, 9.0), ("old_triton", SLOW, False, 7.0)],
    # H200: every trial is of an old kernel, so nothing is current.
    ("NVIDIA_H200", *SHAPE_A, 1): [
        ("old_kernel", DEFAULT, True, 3.0),
        ("old_kernel", FAST, False, 2.0),
    ],
}
KEPT_NOTE = (
    "16x64x128 g1 w4 s3 leads runner-up 64x128x128 g32 w4 s2 by only 0.20 us <= "
    "spread 0.80 us; kept the default"
)


def _retime(config: dict, latency_us: float, is_default: bool = False) -> dict:
    return {
        "config": config,
        "is_default": is_default,
        "rounds": 7,
        "latency_us": latency_us,
        "p20_us": latency_us - 0.4,
        "p80_us": latency_us + 0.4,
    }


def _fill(url: str) -> None:
    engine = open_store(url)
    try:
        with session_scope(engine) as session:
            for device in ("NVIDIA_L20", "NVIDIA_H200"):
                shapes = sorted({(n, k) for d, n, k, _ in PLAN if d == device})
                m_values = sorted({m for d, _, _, m in PLAN if d == device})
                sweep, _ = repo.create_sweep(
                    session,
                    device_name=device,
                    model="test-model",
                    tp=2,
                    strategy="grid",
                    budget=8,
                    space="vllm",
                    seed=0,
                    m_values=m_values,
                    out_dtype="bfloat16",
                    block_shape=(128, 128),
                    shapes=shapes,
                    **DENSE_SWEEP,
                )
                env = {
                    name: repo.get_or_create_environment(
                        session,
                        device_name=device,
                        gpu_name=device.replace("_", " "),
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
                    task := repo.claim_task(
                        session, sweep_id=sweep.sweep_id, worker_id="w", lease_s=60
                    )
                ) is not None:
                    for name, config, is_default, latency_us in PLAN[
                        (device, task.N, task.K, task.M)
                    ]:
                        repo.record_trial(
                            session,
                            task_id=task.task_id,
                            environment_id=env[name],
                            config=config,
                            is_default=is_default,
                            status="ok",
                            latency_us=latency_us,
                        )
                    if (device, task.N, task.K, task.M) == (DEVICE, *SHAPE_A, 16):
                        assert repo.record_decision(
                            session,
                            task_id=task.task_id,
                            worker_id="w",
                            environment_id=env["current"],
                            retimes=[_retime(FAST, 19.7), _retime(DEFAULT, 19.9, True)],
                            decision={
                                "config": DEFAULT,
                                "latency_us": 19.9,
                                "default_latency_us": 19.9,
                                "runner_up": DEFAULT,
                                "spread_us": 0.8,
                                "kept": "default",
                                "note": KEPT_NOTE,
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


def _mounted(text: str) -> list[str]:
    """The config file names a docker mounts text mounts."""
    return sorted(name for name in (FILE_A, FILE_B) if f"/configs/{name}:" in text)


def test_mounts_keep_to_current_trials_unless_allow_stale(client: TestClient) -> None:
    current = client.get("/devices/L20/mounts")
    assert current.status_code == 200
    assert _mounted(current.text) == [FILE_A]  # B is partial: M=16 has stale trials only
    stale = client.get("/devices/L20/mounts", params={"allow_stale": "true"})
    assert stale.status_code == 200
    assert _mounted(stale.text) == [FILE_A, FILE_B]
    explicit = client.get("/devices/L20/mounts", params={"allow_stale": "false"})
    assert explicit.text == current.text


def test_mounts_allow_stale_is_validated_like_the_file_routes(client: TestClient) -> None:
    for route in ("mounts", "preview/configs", "preview/configs.zip", "report"):
        response = client.get(f"/devices/L20/{route}", params={"allow_stale": "maybe"})
        assert response.status_code == 422, route
        (error,) = response.json()["detail"]
        assert (error["loc"], error["type"]) == (["query", "allow_stale"], "bool_parsing"), route


def test_mounts_404_says_stale_trials_were_left_out(client: TestClient) -> None:
    response = client.get("/devices/H200/mounts")
    assert response.status_code == 404
    assert response.json() == {
        "detail": (
            "NVIDIA_H200 has no complete file to mount yet; ?partial=true mounts what there is; "
            "2 ok trial(s) of another kernel or Triton left out (?allow_stale=true uses them)"
        )
    }
    stale = client.get("/devices/H200/mounts", params={"allow_stale": "true"})
    assert stale.status_code == 200
    assert f"/configs/{config_file_name(*SHAPE_A, 'NVIDIA_H200')}:" in stale.text


def test_report_shows_current_winners_and_says_which_versions(client: TestClient) -> None:
    response = client.get("/devices/L20/report")
    assert response.status_code == 200
    html = response.text
    assert (
        f'<p class="note" id="scope">Winners from the trials of the current kernel source '
        f"(kernel {current_kernel_hash()[:12]}) and Triton {installed_triton_minor()} only; "
        "3 ok trial(s) of another kernel or Triton left out (?allow_stale=true includes "
        "them).</p>"
    ) in html
    # A, M=1: FAST at 8 us (current), not the stale SLOW at 4 us; not decided: no spread
    assert "<tr><td>1</td><td class=l>16x64x128 g1 w4 s3</td><td>8.0</td><td>10.0</td>" in html
    assert "128x256x128 g64 w8 s5</td><td>4.0</td>" not in html
    assert "<td class=l>winner</td><td>-</td><td class=l>-</td></tr>" in html
    # B, M=16 has only Triton 3.5 trials: a gap, and the page says why
    assert (
        '<span class="gap">M = 16 only have trials of another kernel or Triton '
        "(?allow_stale=true shows them).</span>"
    ) in html


def test_report_shows_the_spread_and_why_a_decided_winner_was_kept(client: TestClient) -> None:
    html = client.get("/devices/L20/report").text
    assert (
        "<tr><td>16</td><td class=l>64x128x128 g32 w4 s2</td><td>19.9</td><td>19.9</td>"
        "<td>1.00x</td>"
    ) in html
    assert (
        "<td class=l>default (no config beat it beyond the noise)</td><td>0.80</td>"
        "<td class=l>kept default: 16x64x128 g1 w4 s3 leads runner-up 64x128x128 g32 w4 s2 "
        "by only 0.20 us &lt;= spread 0.80 us; kept the default</td></tr>"
    ) in html
    assert "<th class=l>in the file</th><th>spread_us</th><th class=l>decision</th>" in html


def test_report_with_allow_stale_shows_every_trial(client: TestClient) -> None:
    html = client.get("/devices/L20/report", params={"allow_stale": "true"}).text
    assert (
        '<p class="note" id="scope">Winners from the trials of every kernel source and '
        "Triton version (?allow_stale=true).</p>"
    ) in html
    assert "<tr><td>1</td><td class=l>128x256x128 g64 w8 s5</td><td>4.0</td><td>10.0</td>" in html
    assert "only have trials of another kernel or Triton" not in html
    # B, M=16 from Triton 3.5: SLOW at 7 us against the default at 9 us
    assert "<tr><td>16</td><td class=l>128x256x128 g64 w8 s5</td><td>7.0</td><td>9.0</td>" in html


def test_report_of_a_device_with_only_stale_trials(client: TestClient) -> None:
    html = client.get("/devices/H200/report").text
    assert "2 ok trial(s) of another kernel or Triton left out" in html
    assert "<td class=l>16x64x128 g1 w4 s3</td>" not in html
    assert "Coverage gaps: no winner yet for M = 1." in html


def test_file_notes_say_the_default_was_kept_within_the_noise(client: TestClient) -> None:
    body = client.get("/devices/L20/preview/configs").json()
    (file_a,) = [f for f in body["files"] if f["file_name"] == FILE_A]
    assert file_a["notes"] == [
        "M=16: default config kept after interleaved re-timing: no config beat it by more than "
        "the noise (spread 0.80 us)",
    ]


def test_render_labels_each_kind_of_decided_row() -> None:
    rows = (
        ReportRow(
            M=1,
            config=DEFAULT,
            latency_us=9.0,
            default_latency_us=9.0,
            is_default=True,
            decided=True,
            spread_us=0.25,
            kept="fastest",
            kept_note="beats runner-up",
        ),
        ReportRow(
            M=2,
            config=DEFAULT,
            latency_us=9.0,
            default_latency_us=9.0,
            is_default=True,
            decided=True,
            spread_us=None,
        ),
        ReportRow(
            M=4,
            config=FAST,
            latency_us=8.0,
            default_latency_us=9.0,
            is_default=False,
            decided=True,
            spread_us=1.5,
            kept="simpler",
        ),
    )
    shape = ShapeReport(
        key=FamilyShape("dense", Shape(7168, 2048, (128, 128))),
        m_requested=(1, 2, 4),
        rows=rows,
        models=(),
    )
    html = render_report("NVIDIA_L20", [shape], [], version="0.1.0", out_dtype="bfloat16")
    assert (
        "<td class=l>default (fastest)</td><td>0.25</td>"
        "<td class=l>kept fastest: beats runner-up</td></tr>"
    ) in html
    assert (
        "<td class=l>default (no config beat it beyond the noise)</td><td>-</td>"
        "<td class=l>re-timed</td></tr>"
    ) in html
    assert "<td class=l>winner</td><td>1.50</td><td class=l>kept simpler</td></tr>" in html
    assert 'id="scope"' not in html  # no scope given: no note on versions
