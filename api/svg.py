"""Server-side SVG line charts for the HTML report: a log2 x axis (M), a log10 or linear y axis,
no script. Each point is a `<circle class="pt">` with `data-series`, `data-x`, `data-y` and a
`<title>` tooltip, so a reader (or a test) finds each value in the page.

A small writer rather than a plotting library: pygal cannot put a log x axis under a linear y
axis and writes a script into every chart, and matplotlib would outweigh the whole service."""

from __future__ import annotations

import math
from html import escape
from typing import NamedTuple

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
    """An SVG chart of `series` over M (log2 x axis spanning `x_ticks` and the data);
    `reference`: a labelled dotted line at that y (e.g. speedup 1.0), so it does not read as
    data. Points with y <= 0 on a log axis are dropped."""
    points = [(s, x, y) for s in series for x, y in s.points if x > 0 and (y > 0 or not y_log)]
    xs = [x for _, x, _ in points] + x_ticks
    ticks = y_ticks([y for _, _, y in points] + ([reference[0]] if reference else []), y_log)
    x_lo, x_hi = min(xs), max(max(xs), 2 * min(xs))
    left = max(64, 30 + 7 * max(len(fmt(t)) for t in ticks))
    scale = math.log10 if y_log else float

    def px(x: float) -> float:
        return left + math.log2(x / x_lo) / math.log2(x_hi / x_lo) * (WIDTH - left - RIGHT)

    def py(y: float) -> float:
        share = (scale(y) - scale(ticks[0])) / (scale(ticks[-1]) - scale(ticks[0]))
        return HEIGHT - BOTTOM - share * (HEIGHT - TOP - BOTTOM)

    out = [
        f'<svg class="{escape(css_class)}" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" '
        f'height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(title)}">'
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="#fff"/>'
        f'<text x="{left}" y="17" class="title">{escape(title)}</text>',
        *_axes(left, [(py(t), fmt(t)) for t in ticks], [(px(t), fmt(t)) for t in x_ticks], y_label),
    ]
    if reference and ticks[0] <= reference[0] <= ticks[-1]:
        y = py(reference[0])
        out.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" class="reference"/>'
            f'<text x="{WIDTH - RIGHT - 4}" y="{y - 4:.1f}" class="reference-label" '
            f'text-anchor="end">{escape(reference[1])}</text>'
        )
    out += _lines(left, series, [(s, px(x), py(y), x, y) for s, x, y in points])
    return "\n".join([*out, "</svg>"])


def _axes(
    left: float, y_ticks: list[tuple[float, str]], x_ticks: list[tuple[float, str]], y_label: str
) -> list[str]:
    """Grid lines and tick labels at (pixel, label) of both axes, the frame and axis labels."""
    mid = (TOP + HEIGHT - BOTTOM) / 2
    return [
        *(
            f'<line x1="{left}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" class="grid"/>'
            f'<text x="{left - 6}" y="{y + 4:.1f}" class="tick" text-anchor="end">{label}</text>'
            for y, label in y_ticks
        ),
        *(
            f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{HEIGHT - BOTTOM}" class="grid"/>'
            f'<text x="{x:.1f}" y="{HEIGHT - BOTTOM + 16}" class="tick" text-anchor="middle">'
            f"{label}</text>"
            for x, label in x_ticks
        ),
        f'<rect x="{left}" y="{TOP}" width="{WIDTH - left - RIGHT}" '
        f'height="{HEIGHT - TOP - BOTTOM}" class="frame"/>'
        f'<text x="{(left + WIDTH - RIGHT) / 2:.0f}" y="{HEIGHT - 8}" '
        f'class="label" text-anchor="middle">M (rows of A)</text><text x="14" y="{mid:.0f}" '
        f'class="label" text-anchor="middle" transform="rotate(-90 14 {mid:.0f})">'
        f"{escape(y_label)}</text>",
    ]


def _lines(left: float, series: list[Series], drawn: list[tuple]) -> list[str]:
    """Each series' line through its (series, px, py, x, y) points, the points with their
    values, and its legend entry (one row above the plot)."""
    out = []
    for line in series:
        mine = [(cx, cy, x, y) for s, cx, cy, x, y in drawn if s is line]
        dash, name = (' stroke-dasharray="6 4"' if line.dashed else ""), escape(line.name)
        path = " ".join(f"{cx:.1f},{cy:.1f}" for cx, cy, _, _ in mine)
        out += [
            f'<polyline points="{path}" fill="none" stroke="{line.color}" stroke-width="2"{dash}/>',
            *(
                f'<circle class="pt" cx="{cx:.1f}" cy="{cy:.1f}" r="3.5" fill="{line.color}" '
                f'data-series="{name}" data-x="{x:g}" data-y="{y:.6g}"><title>{name}: M={x:g}, '
                f"{fmt(y)}</title></circle>"
                for cx, cy, x, y in mine
            ),
            f'<line x1="{left}" y1="{TOP - 16}" x2="{left + 22}" y2="{TOP - 16}" '
            f'stroke="{line.color}" stroke-width="2"{dash}/><text x="{left + 28}" '
            f'y="{TOP - 12}" class="legend">{name}</text>',
        ]
        left += 40 + 7 * len(line.name)
    return out
