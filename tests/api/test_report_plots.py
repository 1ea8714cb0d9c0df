"""Report plots that can be read: at least three labelled ticks on a log axis, tick
labels clear of the y-axis title, and no empty chart for a shape without measured winners."""

from __future__ import annotations

import re

import pytest

from api.report import ReportRow, ShapeReport, render_report
from api.svg import Series, _log_ticks, line_chart
from tuner.kernels.shape import FamilyShape, Shape


@pytest.mark.parametrize(
    ("low", "high", "ticks"),
    [
        (80, 120, [50.0, 100.0, 200.0]),  # only 100 inside: the nearest 1-2-5 values outside
        (103_339, 1_174_858, [200_000.0, 500_000.0, 1_000_000.0]),
        (9.5, 10.5, [5.0, 10.0, 20.0]),
        (930_000, 1_300_000, [500_000.0, 1_000_000.0, 2_000_000.0]),  # was 930,000 / 1,100,000
        (1, 1e6, [1.0, 10.0, 100.0, 1e3, 1e4, 1e5, 1e6]),  # long ranges: decades
    ],
)
def test_a_log_axis_has_at_least_three_ticks_at_1_2_5_values(low, high, ticks):
    assert _log_ticks(low, high) == ticks


def _ticks(svg: str) -> list[tuple[float, str]]:
    """(x, text) of the y-axis tick labels (right-aligned ones)."""
    return [
        (float(x), text)
        for x, text in re.findall(
            r'<text x="([0-9.]+)" y="[0-9.]+" class="tick" text-anchor="end">([^<]+)</text>', svg
        )
    ]


def test_wide_tick_labels_move_the_plot_right_of_the_axis_title():
    svg = line_chart(
        [Series("winner", "#000", ((1, 585_633.8), (16, 939_887.0)))],
        title="t",
        x_label="M",
        y_label="latency_us",
        y_log=True,
        x_ticks=[1, 16],
    )
    ticks = _ticks(svg)
    assert [text for _, text in ticks] == ["500,000", "1,000,000", "2,000,000"]
    # Right-aligned at x: the widest label (9 characters at 7 px) starts right of the title's
    # 24 px, and the frame starts 6 px right of the labels.
    ((x, _),) = {tick for tick in ticks if tick[1] == "1,000,000"}
    assert x - 7 * 9 >= 24
    assert f'<rect x="{x + 6:g}" y="46"' in svg


def _report(rows: tuple[ReportRow, ...]) -> str:
    shape = ShapeReport(
        key=FamilyShape("dense", Shape(256, 384, (128, 128))),
        m_requested=(1, 16),
        rows=rows,
        models=("tiny",),
    )
    return render_report("TRITON_INTERPRETER", [shape], [], version="0", out_dtype=None)


def test_a_shape_without_measured_winners_gets_a_line_not_an_empty_chart():
    empty = _report(())
    assert "<svg" not in empty
    assert '<p class="note nochart">No measured winner for this shape yet: no chart.</p>' in empty
    measured = _report(
        (ReportRow(M=1, config=None, latency_us=10.0, default_latency_us=20.0, is_default=False),)
    )
    assert measured.count("<svg") == 2 and "nochart" not in measured


def test_the_reference_line_is_labelled_and_drawn_dotted():
    svg = line_chart(
        [Series("speedup", "#000", ((1, 1.5), (16, 0.9)))],
        title="t",
        x_label="M",
        y_label="x",
        y_log=False,
        x_ticks=[1, 16],
        reference_y=1.0,
        reference_label="1.0 = as fast as the default (reference, not data)",
    )
    line = re.search(
        r'<line x1="[0-9.]+" y1="([0-9.]+)" x2="524" y2="[0-9.]+" '
        r'class="reference"/>',
        svg,
    )
    assert line is not None
    y = float(line[1])
    assert (
        f'<text x="520" y="{y - 4:.1f}" class="reference-label" text-anchor="end">1.0 = '
        "as fast as the default (reference, not data)</text>"
    ) in svg


def test_interpreter_rows_show_no_rates_and_the_speedup_line_is_labelled():
    html = _report(
        (ReportRow(M=1, config=None, latency_us=10.0, default_latency_us=20.0, is_default=False),)
    )
    assert "GB/s (CPU)" not in html
    assert ("<td>10.0</td><td>20.0</td><td>2.00x</td><td>-</td><td>-</td>") in html
    assert ">1.0 = as fast as the default (reference, not data)</text>" in html
