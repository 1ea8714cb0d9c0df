"""The HTML report: its numbers over HTTP (current trials unless ?allow_stale, decided winners,
gaps, comparisons), its well-formed SVG charts with every point inside the plot, and the pure
renderer's rooflines and labels; the mounts route beside it."""

from __future__ import annotations

import html as htmllib
import re
import xml.etree.ElementTree as ET

from fastapi.testclient import TestClient

from api.report import ReportRow, ShapeReport, render_report
from tests.api.conftest import KEPT_NOTE, SHAPE_A, VERDICTS
from tests.storefill import DEFAULT, FAST, TRITON
from tuner.files.provenance import current_kernel_hash, installed_triton_minor
from tuner.kernels.dense.family import config_file_name
from tuner.kernels.shape import FamilyShape, Shape


def rows(page: str) -> list[list[str]]:
    """Every table row's cells as text."""
    return [
        [
            htmllib.unescape(re.sub("<[^>]+>", "", c))
            for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", tr, re.S)
        ]
        for tr in re.findall(r"<tr>(.*?)</tr>", page, re.S)
    ]


def row(page: str, *first: str) -> list[str]:
    """The first row whose cells start with `first`."""
    return next(r for r in rows(page) if r[: len(first)] == list(first))


def svgs(page: str) -> dict[str, ET.Element]:
    """Each chart by its class, parsed as XML (so well-formed), every point inside its frame."""
    charts = {}
    for markup in re.findall(r"<svg .*?</svg>", page, re.S):
        svg = ET.fromstring(markup)
        frame = next(e for e in svg if e.get("class") == "frame")
        x0, y0 = float(frame.get("x")), float(frame.get("y"))
        for point in svg.iter("{http://www.w3.org/2000/svg}circle"):
            assert x0 <= float(point.get("cx")) <= x0 + float(frame.get("width")), markup
            assert y0 <= float(point.get("cy")) <= y0 + float(frame.get("height")), markup
        charts[svg.get("class")] = svg
    return charts


def points(svg: ET.Element, series: str) -> list[tuple[str, str]]:
    return [
        (c.get("data-x"), c.get("data-y")) for c in svg.iter() if c.get("data-series") == series
    ]


def test_the_report_shows_current_winners_decisions_and_gaps(client: TestClient) -> None:
    page = client.get("/devices/L20/report").text
    assert (
        f'<p class="note" id="scope">Winners from the trials of the current kernel source (kernel '
        f"{current_kernel_hash()[:12]})\nand Triton {installed_triton_minor()} only; 3 ok trial(s) "
        "of another kernel or Triton\nleft out (?allow_stale=true includes them).</p>"
    ) in page
    # A, M=1: FAST at 8 us (current), not the stale SLOW at 4 us; 2·M·N·K / 8 us = 3.93 TFLOP/s
    assert row(page, "1", "16x64x128 g1 w4 s3")[2:7] == ["8.0", "10.0", "1.25x", "1,968.2", "3.93"]
    # A, M=32: the decision kept MID at its re-timed 14.4 us, with its spread and why
    assert row(page, "32", "16x128x128 g1 w4 s3")[2:4] + row(page, "32")[-3:] == [
        "14.4",
        "19.0",
        "winner",
        "0.80",
        f"kept simpler: {KEPT_NOTE}",
    ]
    assert row(page, "16", "128x256x128 g64 w8 s5")[-3] == "default (winner not faster)"  # a tie
    assert '<span class="gap">Coverage gaps: no winner yet for M = 16, 32.</span>' in page
    lacking = "No winner for M = 2048, 4096: vLLM will use the nearest key there."
    assert f'<p class="note"><span class="gap">{lacking}</span></p>' in page
    assert (
        '<span class="gap">M = 16 only have trials of another kernel or Triton '
        "(?allow_stale=true shows them).</span>"
    ) in page
    charts = svgs(page)
    latency = charts[f"chart latency shape-{SHAPE_A[0]}x{SHAPE_A[1]}"]
    assert points(latency, "winner") == [("1", "8"), ("16", "10"), ("32", "14.4")]
    assert points(latency, "default config") == [("1", "10"), ("16", "10"), ("32", "19")]
    assert len(charts) == 2 and ["2.11.0", TRITON] == row(page, "NVIDIA L20")[4:6]
    assert "<li>sm89 (this device) (L20, L40S, RTX 4090): by default Marlin (weight-only" in page
    assert (
        f"<li>{htmllib.escape(VERDICTS[0])}</li>" in page
        and '<td title="16x64 g1">5.0</td>' in page
    )
    compared = page.split("<h3>N=5120, K=3072: latency_us</h3>")[1]  # vllm-marlin: no column
    assert rows(compared)[:2] == [["M", "triton-default", "triton-tuned"], ["1", "10.0", "5.0"]]
    assert "the Triton columns timed vLLM 0.33.0&#39;s Triton kernel.</p>" in page
    assert "`" not in page


def test_allow_stale_shows_every_trial_and_a_stale_only_device_none(client: TestClient) -> None:
    stale = client.get("/devices/L20/report", params={"allow_stale": "true"}).text
    assert 'id="scope">Winners from the trials of every kernel source and Triton version' in stale
    assert row(stale, "1", "128x256x128 g64 w8 s5")[2:4] == ["4.0", "10.0"]  # the old kernel's
    shape_b = stale.split('id="shape-7168x5120"')[1]
    assert row(shape_b, "16", "128x256x128 g64 w8 s5")[2:4] == ["7.0", "9.0"]  # Triton 3.5
    h200 = client.get("/devices/H200/report").text
    assert "2 ok trial(s) of another kernel or Triton\nleft out" in h200
    assert "Coverage gaps: no winner yet for M = 1." in h200 and "<svg" not in h200
    heading = '<section class="shape" id="shape-5120x3072"><h2>N=5120, K=3072, block_shape'
    assert f"{heading} [128, 128] (test-model)</h2>" in h200
    assert '<p class="note nochart">No measured winner for this shape yet' in h200


def test_mounts(client: TestClient) -> None:
    compose = client.get("/devices/L20/mounts", params={"format": "compose"}).text.splitlines()
    assert f"      source: $PWD/configs/{config_file_name(*SHAPE_A, 'NVIDIA_L20')}" in compose
    assert f"# Tuned with torch 2.11.0, triton {TRITON}, kernels of builtin." in compose
    h200 = client.get("/devices/H200/mounts", params={"allow_stale": "true"}).text
    assert f"/configs/{config_file_name(*SHAPE_A, 'NVIDIA_H200')}:" in h200
    pull = client.get(
        "/devices/L20/mounts", params={"format": "k8s-pull", "server": "http://tuner:8000"}
    )
    assert pull.text.startswith("# NVIDIA_L20 release 1 (1 file(s), content ")
    assert (
        "  - --server\n  - http://tuner:8000\n  - --device\n  - NVIDIA_L20\n"
        "  - --release\n  - '1'\n" in pull.text
    )
    docker = client.get("/devices/L20/mounts").text.splitlines()
    assert "# NVIDIA_L20 is sm89 (compute capability 8.9, from its trials in the store)." in docker
    bad = client.get("/devices/L20/mounts", params={"host_dir": "relative"})
    assert bad.status_code == 422 and "the host folder must be an absolute path" in bad.text
    for query, status in (
        ({"format": "k8s-pull", "server": "ftp://x"}, 422),
        ({"format": "k8s-pull", "release": 9}, 404),
    ):
        assert client.get("/devices/L20/mounts", params=query).status_code == status


KEY = FamilyShape("dense", Shape(7168, 2048, (128, 128)))


def render(shapes, device="NVIDIA_H200", environments=(), **kwargs) -> str:
    return render_report(device, shapes, environments, out_dtype="bfloat16", **kwargs)


def test_decided_rows_the_interpreter_and_the_versions_table() -> None:
    decided = [
        ReportRow(1, DEFAULT, 9.0, 9.0, True, None, True, 0.25, "fastest", "beats it"),
        ReportRow(2, DEFAULT, 9.0, 9.0, True, decided=True),
        ReportRow(4, FAST, 8.0, 9.0, False, decided=True, spread_us=1.5, kept="simpler"),
        ReportRow(16, FAST, None, None, False, imported_from="vllm-0.33.0"),
    ]
    shape = ShapeReport(KEY, (1, 2, 4), tuple(decided), ())
    env = {"triton": "3.8.0", "vllm": "0.33.0", "kernel_source": "vllm"}
    env["kernel_hash"] = "0123456789abcdef"
    page = render([shape], environments=[env])
    assert [row(page, M)[-3:] for M in ("1", "2", "4")] == [
        ["default (fastest)", "0.25", "kept fastest: beats it"],
        ["default (no config beat it beyond the noise)", "-", "re-timed"],
        ["winner", "1.50", "kept simpler"],
    ]
    assert row(page, "16")[2:8] == ["-"] * 5 + ["imported from 'vllm-0.33.0' (not measured)"]
    assert 'id="scope"' not in page  # no scope given: no note on versions
    assert row(page, "-")[5:] == ["3.8.0", "0.33.0", "vllm", "-", "0123456789ab", "-"]
    assert 'title="0123456789abcdef">0123456789ab</td>' in page
    cpu = render([shape], device="TRITON_INTERPRETER")
    assert row(cpu, "4")[2:7] == ["8.0", "9.0", "1.12x", "-", "-"]  # no rates
    assert "CPU timings of the Triton interpreter" in cpu
