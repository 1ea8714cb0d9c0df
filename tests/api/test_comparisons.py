"""Comparisons over HTTP and in the report: what `tuner compare` stored, as stored; the report
says per architecture which kernel vLLM runs."""

from __future__ import annotations

from html import escape
from pathlib import Path

from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import Settings
from db import repo
from db.connection import open_store, session_scope
from tests.storefill import DEFAULT, FAST, fill

VERDICTS = [
    "decode (M <= 32): triton-tuned is fastest over 1 point(s); time of each vs "
    "triton-tuned (above 1: tuned Triton faster): triton-default 2x",
    "prefill (M >= 2048): no point where the kernels could all be compared",
]


def _store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    fill(
        url,
        {(576, 7168, 1): [(DEFAULT, True, "ok", 10.0), (FAST, False, "ok", 6.0)]},
        m_values=(1,),
    )
    engine = open_store(url)
    with session_scope(engine) as session:
        environment_id = repo.get_or_create_environment(
            session,
            device_name="NVIDIA_L20",
            gpu_name="NVIDIA L20",
            compute_capability="8.9",
            driver="580.1",
            cuda="12.9",
            torch="2.11.0",
            triton="3.6.0",
            tuner="0.1.0",
            kernel_hash="abc",
            kernel_source="vllm",
            vllm="0.33.0",
        )
        repo.record_comparison(
            session,
            device_name="NVIDIA_L20",
            environment_id=environment_id,
            model="tiny",
            tp=1,
            out_dtype="bfloat16",
            verdicts=VERDICTS,
            points=[
                repo.PointRow(
                    576, 7168, 1, "triton-tuned", "ok", 5.0, 4.5, 5.5, "16x64x128 g1 w4 s3"
                ),
                repo.PointRow(
                    576, 7168, 1, "triton-default", "ok", 10.0, 9.0, 11.0, "64x128x128 g32 w4 s2"
                ),
                repo.PointRow(
                    576, 7168, 1, "vllm-marlin", "unavailable", None, None, None, "not wired"
                ),
            ],
        )
    engine.dispose()
    return url


def test_comparisons_route_and_report(tmp_path: Path) -> None:
    with TestClient(create_app(Settings(db_url=_store(tmp_path)))) as client:
        response = client.get("/devices/L20/comparisons")
        assert response.status_code == 200, response.text
        (run,) = response.json()
        assert (run["comparison_id"], run["gpu_name"], run["model"], run["tp"]) == (
            1,
            "NVIDIA L20",
            "tiny",
            1,
        )
        assert run["verdicts"] == VERDICTS
        assert (run["kernel_source"], run["vllm"]) == ("vllm", "0.33.0")  # whose Triton kernel
        assert [(p["backend"], p["status"], p["latency_us"]) for p in run["points"]] == [
            ("triton-default", "ok", 10.0),
            ("triton-tuned", "ok", 5.0),
            ("vllm-marlin", "unavailable", None),
        ]
        assert client.get("/devices/H200/comparisons").status_code == 404
        assert client.get("/devices/L20/comparisons?limit=0").status_code == 422
        page = client.get("/devices/L20/report").text
        assert "<h2>Which kernel vLLM runs</h2>" in page
        assert (
            "<li>sm89 (this device) (L20, L40S, RTX 4090): by default Marlin (weight-only "
            "FP8, W8A16);"
        ) in page
        assert "Marlin disabled" not in page.replace("with Marlin disabled Humming runs", "")
        assert f"<li>{escape(VERDICTS[0])}</li>" in page
        assert "; the Triton columns timed vLLM 0.33.0&#x27;s Triton kernel.</p>" in page
        assert '<td title="16x64x128 g1 w4 s3">5.0</td>' in page
        assert (
            "<p>NVIDIA_L20 is sm89 (compute capability 8.9, from its trials in the store).</p>"
        ) in page
        assert "`" not in page  # no markup of the plain-text facts leaks into the page
        assert "<code>--linear-backend triton</code>" in page
        mounts = client.get("/devices/L20/mounts").text
        assert (
            "# NVIDIA_L20 is sm89 (compute capability 8.9, from its trials in the store)."
            in mounts.splitlines()
        )
        assert mounts.splitlines()[-1] == "  --linear-backend triton"
