"""The HTML report: its numbers over HTTP (current trials unless ?allow_stale, decided winners,
gaps, comparisons, the stored ceilings), its well-formed SVG charts with every point inside the
plot, and the pure renderer's rooflines, ticks and labels; the mounts route beside it."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from html import escape
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from api.app import create_app
from api.report import ReportRow, ShapeReport, render_report, usable_ceilings
from api.settings import Settings
from api.svg import Series, line_chart, log_ticks
from db import repo
from db.connection import open_store, session_scope
from tests.api.conftest import KEPT_NOTE, SHAPE_A
from tests.storefill import DEFAULT, FAST, TRITON, fill
from tuner.files.provenance import current_kernel_hash, installed_triton_minor
from tuner.kernels.dense.family import config_file_name
from tuner.kernels.shape import FamilyShape, Shape

VERDICTS = ["decode (M <= 32): triton-tuned is fastest over 1 point(s)", "prefill: no point"]
ROW = "<tr><td>{}</td><td class=l>{}</td><td>{}</td><td>{}</td>"


def svgs(html: str) -> dict[str, ET.Element]:
    """Each chart by its class, parsed as XML (so well-formed), every point inside its frame."""
    charts = {}
    for markup in re.findall(r"<svg .*?</svg>", html, re.S):
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
    html = client.get("/devices/L20/report").text
    assert (
        f'<p class="note" id="scope">Winners from the trials of the current kernel source (kernel '
        f"{current_kernel_hash()[:12]}) and Triton {installed_triton_minor()} only; 3 ok trial(s) "
        "of another kernel or Triton left out (?allow_stale=true includes them).</p>"
    ) in html
    # A, M=1: FAST at 8 us (current), not the stale SLOW at 4 us; 2·M·N·K / 8 us = 3.93 TFLOP/s
    assert (
        ROW.format(1, "16x64x128 g1 w4 s3", "8.0", "10.0")
        + "<td>1.25x</td><td>1,968.2</td><td>3.93</td>"
        in html
    )
    # A, M=32: the decision kept MID at its re-timed 14.4 us, with its spread and why
    assert ROW.format(32, "16x128x128 g1 w4 s3", "14.4", "19.0") in html
    assert (
        "<td class=l>winner</td><td>0.80</td><td class=l>kept simpler: "
        f"{escape(KEPT_NOTE)}</td></tr>" in html
    )
    assert "<td class=l>default (winner not faster)</td>" in html  # A, M=16: a tie
    assert '<span class="gap">Coverage gaps: no winner yet for M = 16, 32.</span>' in html
    assert (
        '<span class="gap">M = 16 only have trials of another kernel or Triton '
        "(?allow_stale=true shows them).</span>"
    ) in html
    charts = svgs(html)
    latency = charts[f"chart latency shape-{SHAPE_A[0]}x{SHAPE_A[1]}"]
    assert points(latency, "winner") == [("1", "8"), ("16", "10"), ("32", "14.4")]
    assert points(latency, "default config") == [("1", "10"), ("16", "10"), ("32", "19")]
    speedup = charts["chart speedup shape-5120x3072"]
    assert points(speedup, "speedup over default") == [
        ("1", "1.25"),
        ("16", "1"),
        ("32", "1.31944"),
    ]
    assert len(charts) == 4 and f"<td class=l>2.11.0</td><td class=l>{TRITON}</td>" in html


def test_allow_stale_shows_every_trial_and_a_stale_only_device_none(client: TestClient) -> None:
    html = client.get("/devices/L20/report", params={"allow_stale": "true"}).text
    assert 'id="scope">Winners from the trials of every kernel source and Triton version' in html
    assert ROW.format(1, "128x256x128 g64 w8 s5", "4.0", "10.0") in html
    assert ROW.format(16, "128x256x128 g64 w8 s5", "7.0", "9.0") in html  # B, Triton 3.5
    h200 = client.get("/devices/H200/report").text
    assert "2 ok trial(s) of another kernel or Triton left out" in h200
    assert "Coverage gaps: no winner yet for M = 1." in h200 and "<svg" not in h200
    assert client.get("/devices/nope/report").status_code == 404


@pytest.mark.parametrize("route", ["mounts", "preview/configs", "report"])
def test_allow_stale_is_validated_alike(client: TestClient, route: str) -> None:
    (error,) = client.get(f"/devices/L20/{route}", params={"allow_stale": "maybe"}).json()["detail"]
    assert (error["loc"], error["type"]) == (["query", "allow_stale"], "bool_parsing")


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
    bad = client.get("/devices/L20/mounts", params={"site_packages": "relative"})
    assert bad.status_code == 422 and "--site-packages must be an absolute path" in bad.text
    for query in (
        {"format": "k8s-pull", "server": "ftp://x"},
        {"format": "k8s-pull", "release": 9},
    ):
        assert client.get("/devices/L20/mounts", params=query).status_code in (404, 422)


def test_comparisons_and_ceilings_from_the_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    fill(
        url,
        {(7168, 2048, 1): [(DEFAULT, True, "ok", 20.0), (FAST, False, "ok", 16.0)]},
        m_values=(1,),
    )
    engine = open_store(url)
    with session_scope(engine) as session:
        [environment_id] = session.execute(
            text("SELECT environment_id FROM environments")
        ).scalars()
        repo.record_ceilings(
            session,
            environment_id=environment_id,
            ceilings={"copy_gbps": 4000.0, "fp8_mm_tflops": 1000.0},
        )
        vllm_env = repo.get_or_create_environment(
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
            environment_id=vllm_env,
            model="tiny",
            tp=1,
            out_dtype="bfloat16",
            verdicts=VERDICTS,
            points=[
                repo.PointRow(
                    7168, 2048, 1, "triton-tuned", "ok", 5.0, 4.5, 5.5, "16x64x128 g1 w4 s3"
                ),
                repo.PointRow(7168, 2048, 1, "triton-default", "ok", 10.0, 9.0, 11.0, "default"),
                repo.PointRow(
                    7168, 2048, 1, "vllm-marlin", "unavailable", None, None, None, "not wired"
                ),
            ],
        )
    engine.dispose()
    with TestClient(create_app(Settings(db_url=url))) as client:
        (run,) = client.get("/devices/L20/comparisons").json()
        assert (run["comparison_id"], run["model"], run["kernel_source"], run["vllm"]) == (
            1,
            "tiny",
            "vllm",
            "0.33.0",
        )
        assert run["verdicts"] == VERDICTS
        assert [(p["backend"], p["status"], p["latency_us"]) for p in run["points"]] == [
            ("triton-default", "ok", 10.0),
            ("triton-tuned", "ok", 5.0),
            ("vllm-marlin", "unavailable", None),
        ]
        assert client.get("/devices/H200/comparisons").status_code == 404
        page = client.get("/devices/L20/report").text
        mounts = client.get("/devices/L20/mounts").text.splitlines()
    # (7168, 2048), M=1 at 16 us: 918.8 GB/s of 4000 is 23.0%; 1.84 TFLOP/s of 1000 is 0.2%.
    assert "<td>918.8</td><td>1.84</td><td>23.0%</td><td>0.2%</td><td class=l>memory</td>" in page
    assert (
        "<h2>Which kernel vLLM runs</h2>" in page and "<code>--linear-backend triton</code>" in page
    )
    assert (
        "<li>sm89 (this device) (L20, L40S, RTX 4090): by default Marlin (weight-only FP8, W8A16);"
        in page
    )
    assert (
        f"<li>{escape(VERDICTS[0])}</li>" in page
        and '<td title="16x64x128 g1 w4 s3">5.0</td>' in page
    )
    assert (
        "; the Triton columns timed vLLM 0.33.0&#x27;s Triton kernel.</p>" in page
        and "`" not in page
    )
    assert "# NVIDIA_L20 is sm89 (compute capability 8.9, from its trials in the store)." in mounts
    assert mounts[-1] == "  --linear-backend triton"


CONFIG = {**FAST}
# (N, K) = (7168, 2048). M=1 at 16 us: 14,700,096 bytes, 29,360,128 flops -> 918.756 GB/s,
# 1.835008 TFLOP/s. M=4096 at 200 us: 82,054,656 bytes, 120,259,084,288 flops -> 410.27 GB/s,
# 601.30 TFLOP/s, 1,465.6 flops per byte (above the ridge at 1000e3/4000 = 250).
SHAPE = ShapeReport(
    key=FamilyShape("dense", Shape(7168, 2048, (128, 128))),
    m_requested=(1, 16, 4096),
    models=("m",),
    rows=(
        ReportRow(M=1, config=CONFIG, latency_us=16.0, default_latency_us=20.0, is_default=False),
        ReportRow(16, CONFIG, None, None, False, imported_from="vllm-0.33.0"),
        ReportRow(4096, CONFIG, 200.0, 250.0, False),
    ),
)
CEILINGS = {"copy_gbps": 4000.0, "fp8_mm_tflops": 1000.0}


def render(shapes=(SHAPE,), device="NVIDIA_H200", environments=(), **kwargs) -> str:
    return render_report(
        device, shapes, environments, version="0.1.0", out_dtype="bfloat16", **kwargs
    )


def test_rooflines_against_the_ceilings() -> None:
    html = render(ceilings=CEILINGS)
    assert "<th>TFLOP/s</th><th>% copy BW</th><th>% FP8 mm</th><th class=l>bound</th>" in html
    assert "<td>918.8</td><td>1.84</td><td>23.0%</td><td>0.2%</td><td class=l>memory</td>" in html
    assert (
        "<td>410.3</td><td>601.30</td><td>10.3%</td><td>60.1%</td><td class=l>compute</td>" in html
    )
    assert (
        "<td>-</td><td>-</td><td>-</td><td>-</td><td class=l>-</td>" in html
    )  # imported: not measured
    assert "imported from &#x27;vllm-0.33.0&#x27; (not measured)" in html
    assert (
        "device-to-device copy 4,000 GB/s (bytes read plus written); FP8 matrix product 1,000.0"
        in html
    )
    assert "The ridge is at 250 flops per byte" in html
    roofline = svgs(html)["chart roofline shape-7168x2048"]
    assert points(roofline, "% of copy bandwidth") == [("1", "22.9689"), ("4096", "10.2568")]
    assert points(roofline, "% of FP8 mm throughput") == [("1", "0.183501"), ("4096", "60.1295")]
    without = render()
    assert "% copy BW" not in without and "chart roofline" not in without
    assert "<td>918.8</td><td>1.84</td><td class=l>winner</td>" in without
    assert "No ceilings measured for this device yet" in without
    one = render(ceilings={"copy_gbps": 4000.0, "fp8_mm_tflops": 0.0})
    assert "<td>23.0%</td><td>-</td><td class=l>-</td>" in one and "ridge" not in one
    assert usable_ceilings({"copy_gbps": 4000, "fp8_mm_tflops": float("nan"), "x": 3.0}) == {
        "copy_gbps": 4000.0
    }
    assert usable_ceilings({"copy_gbps": True, "fp8_mm_tflops": "fast"}) == {}


def test_decided_rows_the_interpreter_and_the_versions_table() -> None:
    decided = [
        ReportRow(
            1,
            DEFAULT,
            9.0,
            9.0,
            True,
            decided=True,
            spread_us=0.25,
            kept="fastest",
            kept_note="beats it",
        ),
        ReportRow(2, DEFAULT, 9.0, 9.0, True, decided=True),
        ReportRow(4, FAST, 8.0, 9.0, False, decided=True, spread_us=1.5, kept="simpler"),
    ]
    shape = ShapeReport(SHAPE.key, (1, 2, 4), tuple(decided), ())
    env = {
        "triton": "3.8.0",
        "vllm": "0.33.0",
        "kernel_source": "vllm",
        "kernel_hash": "0123456789abcdef",
    }
    html = render([shape], environments=[env])
    assert (
        "<td class=l>default (fastest)</td><td>0.25</td><td class=l>kept fastest: beats it</td>"
        in html
    )
    assert (
        "<td class=l>default (no config beat it beyond the noise)</td><td>-</td>"
        "<td class=l>re-timed</td>" in html
    )
    assert "<td class=l>winner</td><td>1.50</td><td class=l>kept simpler</td></tr>" in html
    assert 'id="scope"' not in html  # no scope given: no note on versions
    assert (
        "<td class=l>3.8.0</td><td class=l>0.33.0</td><td class=l>vllm</td><td class=l>-</td>"
        '<td class="l hash" title="0123456789abcdef"><code>0123456789ab</code></td>'
    ) in html
    cpu = render([shape], device="TRITON_INTERPRETER", ceilings=CEILINGS)
    assert "<td>8.0</td><td>9.0</td><td>1.12x</td><td>-</td><td>-</td>" in cpu  # no rates
    assert "CPU timings of the Triton interpreter" in cpu


def test_a_shape_without_winners_and_an_import_left_out() -> None:
    shape = ShapeReport(
        key=FamilyShape("dense", Shape(256, 384, (128, 128))),
        m_requested=(16,),
        rows=(
            ReportRow(
                16, None, None, None, False, imported_from="shipped L20", left_out="needs 300 KiB"
            ),
        ),
        models=("tiny",),
        left_out=((16, "shipped L20", "needs 300 KiB"),),
    )
    html = render([shape])
    assert (
        '<section class="shape" id="shape-256x384"><h2>N=256, K=384, '
        "block_shape [128, 128] (tiny)</h2>"
    ) in html
    assert (
        "M=16: entry imported from &#x27;shipped L20&#x27; left out, it cannot launch on "
        "this device" in html
    )
    assert (
        "<svg" not in html
        and '<p class="note nochart">No measured winner for this shape yet' in html
    )


@pytest.mark.parametrize(
    ("low", "high", "ticks"),
    [
        (80, 120, [50.0, 100.0, 200.0]),  # only 100 inside: the nearest 1-2-5 values outside
        (9.5, 10.5, [5.0, 10.0, 20.0]),
        (930_000, 1_300_000, [500_000.0, 1_000_000.0, 2_000_000.0]),
        (1, 1e6, [1.0, 10.0, 100.0, 1e3, 1e4, 1e5, 1e6]),  # long ranges: decades
    ],
)
def test_a_log_axis_has_three_ticks_at_1_2_5_values(low: float, high: float, ticks: list) -> None:
    assert log_ticks(low, high) == ticks


def test_wide_tick_labels_move_the_plot_and_the_reference_line_is_labelled() -> None:
    wide = line_chart(
        [Series("winner", "#000", ((1, 585_633.8), (16, 939_887.0)))],
        title="t",
        y_label="latency_us",
        y_log=True,
        x_ticks=[1, 16],
    )
    labels = re.findall(
        r'<text x="([0-9.]+)" y="[0-9.]+" class="tick" text-anchor="end">([^<]+)', wide
    )
    assert [label for _, label in labels] == ["500,000", "1,000,000", "2,000,000"]
    x = float(labels[1][0])  # right-aligned: 9 characters of 7 px clear the 24 px title
    assert x - 7 * 9 >= 24 and f'<rect x="{x + 6:g}" y="46"' in wide
    chart = line_chart(
        [Series("speedup", "#000", ((1, 1.5), (16, 0.9)))],
        title="t",
        y_label="x",
        y_log=False,
        x_ticks=[1, 16],
        reference=(1.0, "1.0 = the default"),
    )
    y = float(
        re.search(
            r'<line x1="[0-9.]+" y1="([0-9.]+)" x2="524" y2="[0-9.]+" class="reference"/>', chart
        )[1]
    )
    assert (
        f'<text x="520" y="{y - 4:.1f}" class="reference-label" text-anchor="end">'
        "1.0 = the default</text>" in chart
    )
