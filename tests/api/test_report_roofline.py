"""The HTML report's roofline figures: achieved GB/s and TFLOP/s per winner, and with the device's
ceilings the % of each, the bound and a chart of those % over M (render_report, no store)."""

from __future__ import annotations

from api.report import ReportRow, ShapeReport, render_report, usable_ceilings
from tuner.kernels.shape import FamilyShape, Shape

CONFIG = {
    "BLOCK_SIZE_M": 16,
    "BLOCK_SIZE_N": 64,
    "BLOCK_SIZE_K": 128,
    "GROUP_SIZE_M": 1,
    "num_warps": 4,
    "num_stages": 3,
}
CEILINGS = {"copy_gbps": 4000.0, "fp8_mm_tflops": 1000.0}
# (N, K) = (7168, 2048). M=1 at 16 us: 14,700,096 bytes, 29,360,128 flops -> 918.756 GB/s,
# 1.835008 TFLOP/s. M=4096 at 200 us: 82,054,656 bytes, 120,259,084,288 flops -> 410.27328
# GB/s, 601.29542144 TFLOP/s, 1,465.6 flops per byte (above the ridge at 1000e3/4000 = 250).
SHAPE = ShapeReport(
    key=FamilyShape("dense", Shape(7168, 2048, (128, 128))),
    m_requested=(1, 16, 4096),
    models=("m",),
    rows=(
        ReportRow(M=1, config=CONFIG, latency_us=16.0, default_latency_us=20.0, is_default=False),
        ReportRow(
            M=16,
            config=CONFIG,
            latency_us=None,
            default_latency_us=None,
            is_default=False,
            imported_from="vllm-0.33.0",
        ),
        ReportRow(
            M=4096, config=CONFIG, latency_us=200.0, default_latency_us=250.0, is_default=False
        ),
    ),
)


def _render(ceilings):
    return render_report(
        "NVIDIA_H200", [SHAPE], [], version="0.1.0", out_dtype="bfloat16", ceilings=ceilings
    )


def test_percent_of_ceilings_and_bound_per_winner():
    html = _render(CEILINGS)
    assert "<th>TFLOP/s</th><th>% copy BW</th><th>% FP8 mm</th><th class=l>bound</th>" in html
    assert "<td>918.8</td><td>1.84</td><td>23.0%</td><td>0.2%</td><td class=l>memory</td>" in html
    assert (
        "<td>410.3</td><td>601.30</td><td>10.3%</td><td>60.1%</td><td class=l>compute</td>" in html
    )
    # the imported entry was not measured: no figures
    assert "<td>-</td><td>-</td><td>-</td><td>-</td><td class=l>-</td>" in html
    assert (
        "Ceilings measured on this device: device-to-device copy 4,000 GB/s (bytes read plus "
        "written); FP8 matrix product 1,000.0 TFLOP/s"
    ) in html
    assert "The ridge is at 250 flops per byte" in html


def test_chart_of_the_shares_over_m():
    html = _render(CEILINGS)
    assert html.count('class="chart roofline shape-7168x2048"') == 1
    assert 'data-series="% of copy bandwidth" data-x="1" data-y="22.9689"' in html
    assert 'data-series="% of FP8 mm throughput" data-x="1" data-y="0.183501"' in html
    assert 'data-series="% of copy bandwidth" data-x="4096" data-y="10.2568"' in html
    assert 'data-series="% of FP8 mm throughput" data-x="4096" data-y="60.1295"' in html
    assert 'data-x="16"' not in html.split('class="chart roofline')[1].split("</svg>")[0]


def test_without_ceilings_the_table_keeps_its_columns():
    html = _render(None)
    assert "% copy BW" not in html and "chart roofline" not in html
    assert "<td>918.8</td><td>1.84</td><td class=l>winner</td>" in html
    assert "No ceilings measured for this device yet" in html


def test_one_ceiling_and_bad_values():
    assert usable_ceilings({"copy_gbps": 4000, "fp8_mm_tflops": -1.0, "x": 3.0}) == {
        "copy_gbps": 4000.0
    }
    assert usable_ceilings({"copy_gbps": "fast", "fp8_mm_tflops": float("nan")}) == {}
    assert usable_ceilings({"copy_gbps": True}) == {}
    html = _render({"copy_gbps": 4000.0, "fp8_mm_tflops": 0.0})
    assert "<td>918.8</td><td>1.84</td><td>23.0%</td><td>-</td><td class=l>-</td>" in html
    assert "FP8 matrix product" not in html and "ridge" not in html
    assert 'data-series="% of FP8 mm throughput"' not in html


def test_versions_table_names_vllm_and_kernel_source():
    env = {
        "gpu_name": "NVIDIA H200",
        "compute_capability": "9.0",
        "driver": "580.1",
        "cuda": "12.9",
        "torch": "2.14.0",
        "triton": "3.8.0",
        "vllm": "0.33.0",
        "kernel_source": "vllm",
        "tuner": "0.1.0",
        "kernel_hash": "0123456789abcdef",
        "trials": 7,
    }
    html = render_report("NVIDIA_H200", [SHAPE], [env], version="0.1.0", out_dtype="bfloat16")
    table = html.split('<section id="environments">', 1)[1].split("</section>", 1)[0]
    assert (
        "<th class=l>torch</th><th class=l>triton</th><th class=l>vllm</th>"
        "<th class=l>kernel_source</th><th class=l>tuner</th>"
    ) in table
    assert (
        "<td class=l>2.14.0</td><td class=l>3.8.0</td><td class=l>0.33.0</td>"
        '<td class=l>vllm</td><td class=l>0.1.0</td><td class="l hash" '
        'title="0123456789abcdef"><code>0123456789ab</code></td>'
        "<td class=l>7</td></tr>"
    ) in table
    builtin = dict(env, vllm="", kernel_source="builtin")
    html = render_report("NVIDIA_H200", [SHAPE], [builtin], version="0.1.0", out_dtype=None)
    assert "<td class=l>3.8.0</td><td class=l>-</td><td class=l>builtin</td>" in html
