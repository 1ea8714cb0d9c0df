"""Server-side SVG line charts for the HTML report: a log2 x axis (M), a log10 or linear y axis,
no script. Each point is a `<circle class="pt">` with `data-series`, `data-x`, `data-y` and a
`<title>` tooltip, so a reader (or a test) finds each value in the page.

A small writer rather than a plotting library: pygal cannot put a log x axis under a linear y
axis and writes a script into every chart, and matplotlib would outweigh the whole service."""

from __future__ import annotations

import math
from typing import NamedTuple

from api.templates import PAGES

WIDTH, HEIGHT, TOP, BOTTOM, RIGHT = 540, 310, 46, 44, 16


class Series(NamedTuple):
    """One line of a chart: (x, y) points, drawn with a colour and an optional dash."""

    name: str
    color: str
    points: tuple[tuple[float, float], ...]
    dashed: bool = False


def fmt(value: float) -> str:
    """A tick or tooltip value: thousands separated, three significant digits below 10."""
    if value >= 100 or value == int(value):
        return f"{value:,.0f}"
    return f"{value:.1f}" if value >= 10 else f"{value:.3g}"


def y_ticks(ys: list[float], log: bool) -> list[float]:
    """Ticks of a y axis whose ends are its first and last tick, around `ys`: on a log axis 1-2-5
    values (decades over more than three), from the last at or below min(ys) / 1.25 to the first
    at or above max(ys) * 1.25; on a linear axis about five steps of 1, 2, 2.5 or 5 times a power
    of ten from 0 to the first at or above 1.1 * max(ys)."""
    ys = ys or [1.0]
    if log:
        low, high = min(ys) / 1.25, max(ys) * 1.25
        first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
        steps = (1,) if last - first > 3 else (1, 2, 5)
        values = sorted(m * 10.0**e for e in range(first, last + 1) for m in steps)
        start, end = max(v for v in values if v <= low), min(v for v in values if v >= high)
        return [v for v in values if start <= v <= end]
    top = 1.1 * max([*ys, 1e-9])
    power = 10.0 ** math.floor(math.log10(top / 5))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= top / 5)
    return [round(i * step, 10) for i in range(math.ceil(top / step) + 1)]


def line_chart(
    series: list[Series],
    *,
    title: str,
    y_label: str,
    y_log: bool,
    x_ticks: list[float],
    reference: tuple[float, str] | None = None,
    css_class: str = "chart",
) -> str:
    """An SVG chart (templates/chart.svg) of `series` over M, its log2 x axis spanning `x_ticks`
    and the data; `reference`: a labelled dotted line at that y (e.g. speedup 1.0), so it does
    not read as data. Points with y <= 0 on a log axis are dropped."""
    points = [(s, x, y) for s in series for x, y in s.points if x > 0 and (y > 0 or not y_log)]
    xs = [x for _, x, _ in points] + x_ticks
    ticks = y_ticks([y for _, _, y in points] + ([reference[0]] if reference else []), y_log)
    x_lo, x_hi = min(xs), max(max(xs), 2 * min(xs))
    left = max(64, 30 + 7 * max(len(fmt(t)) for t in ticks))
    scale = math.log10 if y_log else float

    def px(x: float) -> float:
        return round(
            left + math.log2(x / x_lo) / math.log2(x_hi / x_lo) * (WIDTH - left - RIGHT), 1
        )

    def py(y: float) -> float:
        share = (scale(y) - scale(ticks[0])) / (scale(ticks[-1]) - scale(ticks[0]))
        return round(HEIGHT - BOTTOM - share * (HEIGHT - TOP - BOTTOM), 1)

    legend_x = [left + sum(40 + 7 * len(s.name) for s in series[:i]) for i in range(len(series))]
    shown = reference is not None and ticks[0] <= reference[0] <= ticks[-1]
    return PAGES.get_template("chart.svg").render(
        css_class=css_class,
        title=title,
        y_label=y_label,
        width=WIDTH,
        height=HEIGHT,
        left=left,
        right=WIDTH - RIGHT,
        top=TOP,
        bottom=HEIGHT - BOTTOM,
        y_ticks=[(py(t), fmt(t)) for t in ticks],
        x_ticks=[(px(t), fmt(t)) for t in x_ticks],
        reference=(py(reference[0]), reference[1]) if reference and shown else None,
        lines=[
            (s, [(px(x), py(y), x, y) for t, x, y in points if t is s], legend_x[i])
            for i, s in enumerate(series)
        ],
        fmt=fmt,
    )
