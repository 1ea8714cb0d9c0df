"""Server-side SVG line charts for the HTML report: a log2 x axis (M), a log10 or linear y axis,
no script and no dependency. Each point is a `<circle class="pt">` with `data-series`, `data-x`
and `data-y` and a `<title>` tooltip, so a reader (or a test) finds each value in the page."""

from __future__ import annotations

import math
from html import escape
from typing import NamedTuple

WIDTH, HEIGHT, TOP, BOTTOM, RIGHT = 540, 310, 46, 44, 16
CHAR_PX, TITLE_PX = 7, 24  # a tick label's pixels a character; the rotated y title's width


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


def log_ticks(low: float, high: float) -> list[float]:
    """At least three ticks at 1-2-5 values (decades over more than three): those in [low, high],
    then the nearest outside ones (in log distance), to which the axis is drawn out."""
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    steps = (1,) if last - first > 3 else (1, 2, 5)
    values = sorted(m * 10.0**e for e in range(first - 1, last + 2) for m in steps)
    ticks = [v for v in values if low <= v <= high]
    while len(ticks) < 3:
        below = max(v for v in values if v < (ticks[0] if ticks else low))
        above = min(v for v in values if v > (ticks[-1] if ticks else high))
        if math.log10(low / below) <= math.log10(above / high):
            ticks.insert(0, low := below)
        else:
            ticks.append(high := above)
    return ticks


def linear_ticks(low: float, high: float) -> list[float]:
    """About five ticks at 1, 2, 2.5 or 5 times a power of ten."""
    raw = (high - low) / 5
    magnitude = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    start = math.ceil(low / step) * step
    return [round(start + i * step, 10) for i in range(int((high - start) / step) + 1)]


def _y_axis(ys: list[float], y_log: bool) -> tuple[float, float, list[float]]:
    """The y range around the data, with room above (and below on a log axis), and its ticks;
    a log axis reaches out to its outermost ticks."""
    if y_log:
        y_lo, y_hi = min(ys or [1.0]) / 1.25, max(ys or [10.0]) * 1.25
        ticks = log_ticks(y_lo, y_hi)
        return min(y_lo, ticks[0]), max(y_hi, ticks[-1]), ticks
    y_lo, y_hi = min([0.0, *ys]), max(ys or [1.0])
    y_hi += 0.1 * ((y_hi - y_lo) or 1.0)
    return y_lo, y_hi, linear_ticks(y_lo, y_hi)


class _Plot(NamedTuple):
    """The plot area (`left` of it in pixels) and the ranges it maps: log2 x, log10 or linear y."""

    left: float
    x_lo: float
    x_hi: float
    y_lo: float
    y_hi: float
    y_log: bool

    @property
    def width(self) -> float:
        return WIDTH - self.left - RIGHT

    def px(self, x: float) -> float:
        return self.left + math.log2(x / self.x_lo) / math.log2(self.x_hi / self.x_lo) * self.width

    def py(self, y: float) -> float:
        fy = math.log10 if self.y_log else float
        share = (fy(y) - fy(self.y_lo)) / (fy(self.y_hi) - fy(self.y_lo))
        return HEIGHT - BOTTOM - share * (HEIGHT - TOP - BOTTOM)


def _axes(plot: _Plot, ticks: list[float], x_ticks: list[float], y_label: str) -> list[str]:
    """The grid lines and tick labels of both axes, the plot's frame and the axis labels."""
    left, mid_y = plot.left, (TOP + HEIGHT - BOTTOM) / 2
    out = [
        f'<line x1="{left}" y1="{plot.py(t):.1f}" x2="{WIDTH - RIGHT}" y2="{plot.py(t):.1f}" '
        f'class="grid"/><text x="{left - 6}" y="{plot.py(t) + 4:.1f}" class="tick" '
        f'text-anchor="end">{fmt(t)}</text>'
        for t in ticks
    ]
    out += [
        f'<line x1="{plot.px(t):.1f}" y1="{TOP}" x2="{plot.px(t):.1f}" y2="{HEIGHT - BOTTOM}" '
        f'class="grid"/><text x="{plot.px(t):.1f}" y="{HEIGHT - BOTTOM + 16}" class="tick" '
        f'text-anchor="middle">{fmt(t)}</text>'
        for t in x_ticks
    ]
    out.append(
        f'<rect x="{left}" y="{TOP}" width="{plot.width}" height="{HEIGHT - TOP - BOTTOM}" '
        f'class="frame"/><text x="{left + plot.width / 2:.0f}" y="{HEIGHT - 8}" class="label" '
        f'text-anchor="middle">M (rows of A)</text><text x="14" y="{mid_y:.0f}" class="label" '
        f'text-anchor="middle" transform="rotate(-90 14 {mid_y:.0f})">{escape(y_label)}</text>'
    )
    return out


def _lines(
    plot: _Plot, series: list[Series], points: list[tuple[Series, float, float]]
) -> list[str]:
    """Each series' line, its points and its legend entry (one row above the plot)."""
    out = []
    legend_x = plot.left
    for line in series:
        drawn = [(plot.px(x), plot.py(y), x, y) for s, x, y in points if s is line]
        dash = ' stroke-dasharray="6 4"' if line.dashed else ""
        name = escape(line.name)
        path = " ".join(f"{cx:.1f},{cy:.1f}" for cx, cy, _, _ in drawn)
        out.append(
            f'<polyline points="{path}" fill="none" stroke="{line.color}" stroke-width="2"{dash}/>'
        )
        out.extend(
            f'<circle class="pt" cx="{cx:.1f}" cy="{cy:.1f}" r="3.5" fill="{line.color}" '
            f'data-series="{name}" data-x="{x:g}" data-y="{y:.6g}"><title>{name}: M={x:g}, '
            f"{fmt(y)}</title></circle>"
            for cx, cy, x, y in drawn
        )
        out.append(
            f'<line x1="{legend_x}" y1="{TOP - 16}" x2="{legend_x + 22}" y2="{TOP - 16}" '
            f'stroke="{line.color}" stroke-width="2"{dash}/><text x="{legend_x + 28}" '
            f'y="{TOP - 12}" class="legend">{name}</text>'
        )
        legend_x += 40 + CHAR_PX * len(line.name)
    return out


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
    """An SVG chart of `series` over M; `reference`: a labelled dotted line at that y (e.g.
    speedup 1.0) so it does not read as data. Points with y <= 0 on a log axis are dropped."""
    points = [(s, x, y) for s in series for x, y in s.points if x > 0 and (y > 0 or not y_log)]
    xs = [x for _, x, _ in points] + x_ticks
    ys = [y for _, _, y in points] + ([reference[0]] if reference else [])
    y_lo, y_hi, ticks = _y_axis(ys, y_log)
    left = max(64, TITLE_PX + 6 + CHAR_PX * max(len(fmt(t)) for t in ticks))
    plot = _Plot(left, min(xs), max(max(xs), min(xs) * 2), y_lo, y_hi, y_log)
    out = [
        f'<svg class="{escape(css_class)}" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" '
        f'height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(title)}">'
        f'<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="#fff"/>'
        f'<text x="{left}" y="17" class="title">{escape(title)}</text>',
        *_axes(plot, ticks, x_ticks, y_label),
    ]
    if reference and y_lo <= reference[0] <= y_hi:
        y = plot.py(reference[0])
        out.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" class="reference"/>'
            f'<text x="{WIDTH - RIGHT - 4}" y="{y - 4:.1f}" class="reference-label" '
            f'text-anchor="end">{escape(reference[1])}</text>'
        )
    return "\n".join([*out, *_lines(plot, series, points), "</svg>"])
