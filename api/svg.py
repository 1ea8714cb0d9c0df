"""Small server-side SVG line charts for the HTML report (no JavaScript, no dependency)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

WIDTH, HEIGHT = 540, 310
_LEFT, _RIGHT, _TOP, _BOTTOM = 64, 16, 46, 44
# Tick labels are about this many pixels a character (the report's 11 px sans-serif); the
# rotated y-axis title takes the first 24 px, so the plot starts right of the widest label.
_CHAR_PX = 7
_TITLE_PX = 24


@dataclass(frozen=True)
class Series:
    """One line of a chart: (x, y) points, drawn with a colour and an optional dash."""

    name: str
    color: str
    points: tuple[tuple[float, float], ...]
    dashed: bool = False


def _fmt(value: float) -> str:
    if value >= 100 or value == int(value):
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def _log_ticks(low: float, high: float) -> list[float]:
    """At least three labelled ticks on a log axis, all at 1-2-5 values: decades when the
    range spans more than three, else 1, 2 and 5 of each decade. Where fewer than three such
    values fall in [low, high], the nearest outside ones (in log distance) are added, and the
    axis is drawn out to them (`line_chart`).

    Args:
        low: the axis' lowest value (> 0).
        high: its highest value (>= low).

    Returns:
        The tick values, ascending; the first may be below `low`, the last above `high`.
    """
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    steps = (1,) if last - first > 3 else (1, 2, 5)
    values = sorted(m * 10.0**e for e in range(first - 1, last + 2) for m in steps)
    ticks = [v for v in values if low <= v <= high]
    while len(ticks) < 3:
        below = max(v for v in values if v < (ticks[0] if ticks else low))
        above = min(v for v in values if v > (ticks[-1] if ticks else high))
        if math.log10(low / below) <= math.log10(above / high):
            ticks.insert(0, below)
            low = below
        else:
            ticks.append(above)
            high = above
    return ticks


def _linear_ticks(low: float, high: float) -> list[float]:
    raw = (high - low) / 5
    magnitude = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    start = math.ceil(low / step) * step
    return [round(start + i * step, 10) for i in range(int((high - start) / step) + 1)]


@dataclass(frozen=True)
class _Frame:
    """The plot area in pixels and the data ranges it maps: a log2 x axis, a log10 or linear
    y axis."""

    left: float
    x_lo: float
    x_hi: float
    y_lo: float
    y_hi: float
    y_log: bool

    @property
    def plot_w(self) -> float:
        return WIDTH - self.left - _RIGHT

    @property
    def plot_h(self) -> float:
        return HEIGHT - _TOP - _BOTTOM

    def px(self, x: float) -> float:
        span = math.log2(self.x_hi) - math.log2(self.x_lo)
        return self.left + (math.log2(x) - math.log2(self.x_lo)) / span * self.plot_w

    def py(self, y: float) -> float:
        fy = math.log10 if self.y_log else (lambda v: v)
        return (
            _TOP
            + self.plot_h
            - (fy(y) - fy(self.y_lo)) / (fy(self.y_hi) - fy(self.y_lo)) * self.plot_h
        )


def _ranges(xs: list[float], ys: list[float], y_log: bool) -> tuple[float, float, float, float]:
    """(x_lo, x_hi, y_lo, y_hi) around the data, with room above (and below on a log axis)."""
    x_lo, x_hi = min(xs or [1.0]), max(xs or [2.0])
    if x_hi <= x_lo:
        x_hi = x_lo * 2
    if y_log:
        return x_lo, x_hi, min(ys or [1.0]) / 1.25, max(ys or [10.0]) * 1.25
    y_lo = min(0.0, min(ys or [0.0]))
    y_hi = max(ys or [1.0])
    return x_lo, x_hi, y_lo, y_hi + 0.1 * ((y_hi - y_lo) or 1.0)


def _grid(frame: _Frame, y_ticks: list[float], x_ticks: list[float]) -> list[str]:
    """The grid lines and tick labels of both axes, then the plot's frame."""
    out = []
    for tick in y_ticks:
        y = frame.py(tick)
        out.append(
            f'<line x1="{frame.left}" y1="{y:.1f}" x2="{WIDTH - _RIGHT}" y2="{y:.1f}" '
            'class="grid"/>'
        )
        out.append(
            f'<text x="{frame.left - 6}" y="{y + 4:.1f}" class="tick" '
            f'text-anchor="end">{_fmt(tick)}</text>'
        )
    for tick in x_ticks:
        x = frame.px(tick)
        out.append(
            f'<line x1="{x:.1f}" y1="{_TOP}" x2="{x:.1f}" y2="{_TOP + frame.plot_h}" class="grid"/>'
        )
        out.append(
            f'<text x="{x:.1f}" y="{_TOP + frame.plot_h + 16}" class="tick" '
            f'text-anchor="middle">{_fmt(tick)}</text>'
        )
    out.append(
        f'<rect x="{frame.left}" y="{_TOP}" width="{frame.plot_w}" '
        f'height="{frame.plot_h}" class="frame"/>'
    )
    return out


def _lines(frame: _Frame, series: list[Series], points) -> list[str]:
    """Each series' polyline, its points (with data attributes and a tooltip) and its legend
    entry, one row between the title and the plot, left to right."""
    out = []
    legend_x = frame.left
    for line in series:
        drawn = [(x, y) for s, x, y in points if s is line]
        dash = ' stroke-dasharray="6 4"' if line.dashed else ""
        if len(drawn) > 1:
            path = " ".join(f"{frame.px(x):.1f},{frame.py(y):.1f}" for x, y in drawn)
            out.append(
                f'<polyline points="{path}" fill="none" stroke="{line.color}" '
                f'stroke-width="2"{dash}/>'
            )
        for x, y in drawn:
            out.append(
                f'<circle class="pt" cx="{frame.px(x):.1f}" cy="{frame.py(y):.1f}" r="3.5" '
                f'fill="{line.color}" data-series="{escape(line.name)}" data-x="{x:g}" '
                f'data-y="{y:.6g}"><title>{escape(line.name)}: M={x:g}, {_fmt(y)}</title></circle>'
            )
        ly = _TOP - 12
        out.append(
            f'<line x1="{legend_x}" y1="{ly - 4}" x2="{legend_x + 22}" y2="{ly - 4}" '
            f'stroke="{line.color}" stroke-width="2"{dash}/>'
        )
        out.append(f'<text x="{legend_x + 28}" y="{ly}" class="legend">{escape(line.name)}</text>')
        legend_x += 40 + 7 * len(line.name)
    return out


def line_chart(
    series: list[Series],
    *,
    title: str,
    x_label: str,
    y_label: str,
    y_log: bool,
    x_ticks: list[float],
    reference_y: float | None = None,
    reference_label: str = "",
    css_class: str = "chart",
) -> str:
    """An SVG chart with a log2 x axis (M) and a log10 or linear y axis.

    Every point is a `<circle class="pt">` with `data-series`, `data-x` and `data-y`, and a
    `<title>` tooltip, so a test (or a reader) can find each value in the DOM.

    Args:
        series: the lines; points with a non-positive y on a log axis are dropped.
        title: drawn above the plot.
        x_label: the x axis' label.
        y_label: the y axis' label.
        y_log: log10 y axis (else linear, starting at 0 or below the data).
        x_ticks: x values to label (positive).
        reference_y: draw a horizontal reference line at this y (e.g. speedup 1.0).
        reference_label: the text at the reference line's right end, saying what it is
            (e.g. "1.0 = vLLM's default config"), so it does not read as data.
        css_class: class of the `<svg>` element.

    Returns:
        The `<svg>` element's markup.
    """
    points = [(s, x, y) for s in series for x, y in s.points if x > 0 and (y > 0 or not y_log)]
    xs = [x for _, x, _ in points] + list(x_ticks)
    ys = [y for _, _, y in points] + ([reference_y] if reference_y is not None else [])
    x_lo, x_hi, y_lo, y_hi = _ranges(xs, ys, y_log)
    y_ticks = _log_ticks(y_lo, y_hi) if y_log else _linear_ticks(y_lo, y_hi)
    if y_log:  # the axis reaches its outermost 1-2-5 ticks
        y_lo, y_hi = min(y_lo, y_ticks[0]), max(y_hi, y_ticks[-1])
    left = max(_LEFT, _TITLE_PX + 6 + _CHAR_PX * max(len(_fmt(t)) for t in y_ticks))
    frame = _Frame(left, x_lo, x_hi, y_lo, y_hi, y_log)
    plot_w, plot_h = frame.plot_w, frame.plot_h
    out = [
        f'<svg class="{escape(css_class)}" xmlns="http://www.w3.org/2000/svg" '
        f'width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="{escape(title)}">',
        f'<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="#fff"/>',
        f'<text x="{left}" y="17" class="title">{escape(title)}</text>',
        *_grid(frame, y_ticks, x_ticks),
    ]
    if reference_y is not None and y_lo <= reference_y <= y_hi:
        y = frame.py(reference_y)
        out.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{WIDTH - _RIGHT}" y2="{y:.1f}" class="reference"/>'
        )
        if reference_label:
            out.append(
                f'<text x="{WIDTH - _RIGHT - 4}" y="{y - 4:.1f}" class="reference-label" '
                f'text-anchor="end">{escape(reference_label)}</text>'
            )
    out.append(
        f'<text x="{left + plot_w / 2:.0f}" y="{HEIGHT - 8}" class="label" '
        f'text-anchor="middle">{escape(x_label)}</text>'
    )
    out.append(
        f'<text x="14" y="{_TOP + plot_h / 2:.0f}" class="label" text-anchor="middle" '
        f'transform="rotate(-90 14 {_TOP + plot_h / 2:.0f})">{escape(y_label)}</text>'
    )
    out.extend(_lines(frame, series, points))
    out.append("</svg>")
    return "\n".join(out)
