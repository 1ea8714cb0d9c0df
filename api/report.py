"""The HTML report of a device (templates/report.html): per shape, the winner's and the default's
latency over M, speedup, achieved bandwidth and throughput, coverage gaps; the imported files,
which kernel vLLM runs, and the versions tuned with.

Charts are drawn server-side (templates/chart.svg): a log2 x axis (M), a log10 y axis, no
script; each point is a `<circle class="pt">` with `data-series`, `data-x`, `data-y` and
a `<title>` tooltip, so a reader (or a test) finds each value in the page. A small writer rather
than a plotting library: pygal cannot put a log x axis under a linear y axis and writes a script
into every chart, and matplotlib would outweigh the whole service."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from markupsafe import Markup

from api.templates import PAGES
from db import repo
from tuner.core import REQUIRED_M, VLLM_M_GRID, ComparisonStatus
from tuner.files.device import DeviceView, Scope
from tuner.files.merge import import_targets
from tuner.inputs.backends import backend_lines, device_advice
from tuner.kernels.config import KernelConfig
from tuner.kernels.registry import get_family
from tuner.kernels.shape import FamilyShape, block_shape_text
from tuner.measure.roofline import OUT_BYTES, shape_roofline

X_TICKS = [1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0]
SHAPE_HEADS = (
    "M|l:winner config|latency_us|default_us|speedup|GB/s|TFLOP/s|l:in the file|spread_us|"
    "l:decision"
).split("|")
ENV_COLUMNS = "gpu_name compute_capability driver cuda torch triton vllm kernel_source tuner"


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


def y_ticks(ys: list[float]) -> list[float]:
    """Ticks of a log y axis whose ends are its first and last tick, around `ys`: 1-2-5 values
    (decades over more than three), from the last at or below min(ys) / 1.25 to the first at or
    above max(ys) * 1.25."""
    ys = ys or [1.0]
    low, high = min(ys) / 1.25, max(ys) * 1.25
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    steps = (1,) if last - first > 3 else (1, 2, 5)
    values = sorted(m * 10.0**e for e in range(first, last + 1) for m in steps)
    start, end = max(v for v in values if v <= low), min(v for v in values if v >= high)
    return [v for v in values if start <= v <= end]


def line_chart(
    series: list[Series], *, title: str, y_label: str, x_ticks: list[float], css_class: str
) -> str:
    """An SVG chart (templates/chart.svg) of `series` over M on log scales, its x axis (log2)
    spanning `x_ticks` and the data. Points with x or y <= 0 are dropped."""
    points = [(s, x, y) for s in series for x, y in s.points if x > 0 and y > 0]
    xs = [x for _, x, _ in points] + x_ticks
    ticks = y_ticks([y for _, _, y in points])
    x_lo, x_hi = min(xs), max(max(xs), 2 * min(xs))
    left = max(64, 30 + 7 * max(len(fmt(t)) for t in ticks))

    def px(x: float) -> float:
        return round(
            left + math.log2(x / x_lo) / math.log2(x_hi / x_lo) * (WIDTH - left - RIGHT), 1
        )

    def py(y: float) -> float:
        share = math.log(y / ticks[0]) / math.log(ticks[-1] / ticks[0])
        return round(HEIGHT - BOTTOM - share * (HEIGHT - TOP - BOTTOM), 1)

    legend_x = [left + sum(40 + 7 * len(s.name) for s in series[:i]) for i in range(len(series))]
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
        lines=[
            (s, [(px(x), py(y), x, y) for t, x, y in points if t is s], legend_x[i])
            for i, s in enumerate(series)
        ],
        fmt=fmt,
    )


@dataclass(frozen=True)
class ReportRow:
    """One M of a shape: the winner's and the default config's median latency (ok trials).

    A decided winner (kept after interleaved re-timing) has the spread it had to beat and why
    it was kept ("fastest", "default" or "simpler") with the decision's note; an imported entry
    has its label (`imported_from`), and `left_out` says why it cannot launch on the device.
    """

    M: int
    config: dict[str, int] | None
    latency_us: float | None
    default_latency_us: float | None
    is_default: bool
    imported_from: str | None = None
    decided: bool = False
    spread_us: float | None = None
    kept: str | None = None
    kept_note: str | None = None
    left_out: str | None = None

    @property
    def speedup(self) -> float | None:
        """The default's latency over the winner's, where both were measured."""
        if self.latency_us and self.default_latency_us:
            return self.default_latency_us / self.latency_us
        return None


@dataclass(frozen=True)
class ShapeReport:
    """One shape of the device (`key`: its family, N, K, block_shape and params); `m_stale`: M
    whose trials are all stale; `left_out`: (M, label, reason) of imported entries that cannot
    launch on the device."""

    key: FamilyShape
    m_requested: tuple[int, ...]
    rows: tuple[ReportRow, ...]
    models: tuple[str, ...]
    m_stale: tuple[int, ...] = ()
    left_out: tuple[tuple[int, str, str], ...] = ()

    @property
    def label(self) -> str:
        """The section's heading, as the family labels its shapes ("N=.., K=..")."""
        return get_family(self.key.family).shape_label(self.key.shape)

    @property
    def anchor(self) -> str:
        """The section's id suffix, unique per file."""
        return get_family(self.key.family).shape_anchor(self.key.shape)


def report_shapes(view: DeviceView) -> list[ShapeReport]:
    """One section per shape with a winner, an M grid or imported entries, in shape order: its
    rows by M (measured winners, else imported entries, else those the launch check left out)."""
    coverage = {FamilyShape.of_row(c): c for c in view.coverage}
    rows: dict[FamilyShape, dict[int, ReportRow]] = {}
    for w in view.winners:
        rows.setdefault(FamilyShape.of_row(w), {})[w.M] = ReportRow(
            *(w.M, w.config, w.latency_us, w.default_latency_us, w.is_default),
            decided=w.decided,
            spread_us=w.spread_us,
            kept=w.kept,
            kept_note=w.note,
        )
    imported = import_targets(set(rows) | set(coverage), view.imported, view.device_name)
    for key, extra in imported.items():
        mine = rows.setdefault(key, {})
        for M, config in extra.configs.items():
            mine.setdefault(M, ReportRow(M, config, None, None, False, extra.labels[M]))
        for M, (label, reason) in extra.left_out.items():
            mine.setdefault(M, ReportRow(M, None, None, None, False, label, left_out=reason))
    shapes = []
    for key in sorted(set(rows) | set(coverage)):
        cov, found, by_m = coverage.get(key), imported.get(key), rows.get(key, {})
        shapes.append(
            ShapeReport(
                key,
                m_requested=cov.m_requested if cov else (),
                rows=tuple(by_m[M] for M in sorted(by_m)),
                models=cov.models if cov else (),
                m_stale=tuple(cov.m_stale) if cov else (),
                left_out=tuple((M, *why) for M, why in sorted(found.left_out.items()))
                if found
                else (),
            )
        )
    return shapes


def _emitted(row: ReportRow) -> str:
    """What the file holds at this M, and why."""
    if row.left_out is not None:
        return f"left out: imported from '{row.imported_from}', cannot launch here"
    if row.latency_us is None:
        return f"imported from '{row.imported_from}' (not measured)" if row.imported_from else "-"
    if row.is_default and row.decided and row.kept != "fastest":
        return "default (no config beat it beyond the noise)"
    if row.is_default:
        return "default (fastest)"
    if row.default_latency_us is None:
        return "winner (no default baseline)"
    return "default (winner not faster)" if row.latency_us >= row.default_latency_us else "winner"


def _decision(row: ReportRow) -> str:
    if not row.decided:
        return "-"
    if row.kept is None:
        return "re-timed"
    return f"kept {row.kept}: {row.kept_note}" if row.kept_note else f"kept {row.kept}"


def _num(value: float | None, digits: int = 1, unit: str = "") -> str:
    return "-" if value is None else f"{value:,.{digits}f}{unit}"


def _ms(values: Iterable[int]) -> str:
    return ", ".join(map(str, values))


def _charts(shape: ShapeReport) -> list[Markup]:
    """The winner's and the default's latency over M (the table has the speedup)."""
    winners = tuple((r.M, r.latency_us) for r in shape.rows if r.latency_us is not None)
    if not winners:
        return []
    winner = Series("winner", "#1f6feb", winners)
    defaults = tuple((r.M, r.default_latency_us) for r in shape.rows if r.default_latency_us)
    chart = line_chart(
        [winner, Series("default config", "#cf222e", defaults, dashed=True)],
        title=f"latency_us over M (log scales), {shape.label}",
        y_label="latency_us",
        x_ticks=X_TICKS,
        css_class=f"chart latency shape-{shape.anchor}",
    )
    return [Markup(chart)]


def _coverage(shape: ShapeReport, done: set[int]) -> dict:
    """What the notes on a shape's M grid say: its requested M, measured (`done`) and imported
    ones, M without a winner (`gaps`, the `stale`-only ones named), vLLM's required M without
    one (`lacking`: it uses the nearest key there) and vLLM's grid M not tuned."""
    imported = {r.M: r.imported_from for r in shape.rows if r.latency_us is None and r.config}
    gaps = [M for M in shape.m_requested if M not in done]
    return {
        "requested": _ms(shape.m_requested) or "none",
        "done": len(done),
        "imported": len(imported),
        "labels": ", ".join(repr(label) for label in sorted({str(v) for v in imported.values()})),
        "gaps": _ms(gaps),
        "lacking": _ms(M for M in REQUIRED_M if M not in done | set(imported)),
        "stale": _ms(M for M in gaps if M in shape.m_stale),
        "grid_missing": _ms(M for M in VLLM_M_GRID if M not in done) if done and not gaps else "",
    }


def _cells(r: ReportRow, out_dtype: str, cpu: bool, key: FamilyShape) -> list[str]:
    """One M: winner config, both latencies, speedup, throughput ("-" on the interpreter, `cpu`:
    its rates say nothing of a GPU's), what the file holds, spread and decision."""
    config = r.config or {}
    short = KernelConfig.from_dict(config).short() if "num_stages" in config else "-"
    us = r.latency_us
    f = None
    if not cpu and us is not None and 0 < us < math.inf:
        f = shape_roofline(key, r.M, us, out_dtype=out_dtype)
    rates = [_num(f.gbps), _num(f.tflops, 2)] if f else ["-", "-"]
    times = [_num(r.latency_us), _num(r.default_latency_us), _num(r.speedup, 2, unit="x")]
    return [str(r.M), short, *times, *rates, _emitted(r), _num(r.spread_us, 2), _decision(r)]


def _shape(shape: ShapeReport, out_dtype: str, cpu: bool) -> dict:
    """A shape's section: heading, notes, charts and table (`_cells`)."""
    models = f" ({', '.join(shape.models)})" if shape.models else ""
    blocks = ("block_shape " if shape.key.shape.block_shape else "") + block_shape_text(
        shape.key.shape.block_shape
    )
    return {
        "anchor": shape.anchor,
        "label": shape.label,
        "heading": f"{shape.label}, {blocks}{models}",
        "left_out": shape.left_out,
        "coverage": _coverage(shape, {r.M for r in shape.rows if r.latency_us is not None}),
        "charts": _charts(shape),
        "heads": SHAPE_HEADS,
        "rows": [_cells(r, out_dtype, cpu, shape.key) for r in shape.rows],
    }


def _comparison_tables(run: repo.ComparisonInfo) -> list[tuple]:
    """Per (N, K) of a `tuner compare` run: (N, K, backends timed, {M: {backend: point}})."""
    tables = []
    for N, K in dict.fromkeys((p.N, p.K) for p in run.points):
        points = [p for p in run.points if (p.N, p.K) == (N, K)]
        timed = [p.backend for p in points if p.status != ComparisonStatus.UNAVAILABLE]
        ms = sorted({p.M for p in points})
        by_m = {M: {p.backend: p for p in points if p.M == M} for M in ms}
        tables.append((N, K, list(dict.fromkeys(timed)), by_m))
    return tables


def render_report(
    device_name: str,
    shapes: Sequence[ShapeReport],
    environments: Sequence[Mapping[str, object]],
    *,
    version: str,
    out_dtype: str | None,
    scope: Scope | None = None,
    compute_capability: str | None = None,
    comparison: repo.ComparisonInfo | None = None,
    imports: Sequence[repo.ImportInfo] = (),
    imported_only: str | None = None,
    abs_: Sequence[repo.AbInfo] = (),
) -> str:
    """The whole page: a standalone HTML document (inline CSS and SVG, no script).

    `environments` are the versions trials ran with (db.repo.EnvironmentRow as dicts); `scope`
    which trials the winners come from (None: no note); `compute_capability` marks the device's
    architecture among those vLLM runs other kernels on; `comparison` the newest `tuner compare`
    run; `imported_only` the line for a device with imported files only; `abs_` the device's
    finished `tuner ab` runs, newest first.
    """
    cpu = device_name == "TRITON_INTERPRETER"
    bytes_dtype = out_dtype if out_dtype in OUT_BYTES else "bfloat16"  # both are 2 bytes
    facts = backend_lines(compute_capability)
    return PAGES.get_template("report.html").render(
        device=device_name,
        version=version,
        out_dtype=out_dtype,
        cpu=cpu,
        imported_only=imported_only,
        scope=scope,
        shapes=[_shape(s, bytes_dtype, cpu) for s in shapes],
        imports=imports,
        advice=[*device_advice(device_name, [compute_capability or ""]).lines(), facts[0]],
        facts=[line[2:] for line in facts[1:]],
        run=comparison,
        comparisons=_comparison_tables(comparison) if comparison else [],
        env_columns=ENV_COLUMNS.split(),
        environments=environments,
        abs=[info for info in abs_ if info.result],
    )
