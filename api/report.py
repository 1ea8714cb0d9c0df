"""The HTML report of a device (templates/report.html): per shape, the winner's and the default's
latency over M, speedup, achieved bandwidth and throughput, coverage gaps; the imported files,
which kernel vLLM runs, and the versions tuned with.

The chart is plain SVG drawn on the server (no script): log scales on both axes, each point a
`<circle>` with `data-series`, `data-x`, `data-y` and a `<title>`; the table holds every value.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from html import escape

from jinja2 import Environment, PackageLoader
from markupsafe import Markup

import tuner
from db import repo
from tuner.core import REQUIRED_M, VLLM_M_GRID, ComparisonStatus
from tuner.files.device import DeviceView, Scope
from tuner.files.merge import import_targets
from tuner.inputs.backends import backend_lines, device_advice
from tuner.kernels.config import KernelConfig
from tuner.kernels.registry import get_family
from tuner.kernels.shape import FamilyShape, block_shape_text
from tuner.measure.roofline import OUT_BYTES, shape_roofline

SHAPE_HEADS = (
    "M|l:winner config|latency_us|default_us|speedup|GB/s|TFLOP/s|l:in the file|spread_us|"
    "l:decision"
).split("|")
ENV_COLUMNS = "gpu_name compute_capability driver cuda torch triton vllm kernel_source tuner"
WIDTH, HEIGHT, PAD = 540, 300, 40
# The service's pages (api/templates, autoescaped): the index and the report.
PAGES = Environment(loader=PackageLoader("api"), autoescape=True, trim_blocks=True)


def _code(text: str) -> Markup:
    """The facts are written for plain text: their `code` spans become <code> in a page."""
    return Markup(re.sub(r"`([^`]+)`", r"<code>\1</code>", escape(text, quote=False)))


PAGES.filters["code"] = _code  # the chart's size and the frame's distance from its edge


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


def _scale(value: float, low: float, high: float, size: int) -> float:
    """Where `value` lies on a log axis from `low` to `high` drawn `size` pixels long."""
    return round(PAD + math.log(value / low) / math.log(high / low) * (size - 2 * PAD), 1)


def _chart(shape: ShapeReport) -> dict | None:
    """The winner's and the default's latency over M (both axes log; None without a measured
    winner): each series' points as (x px, y px, M, latency_us), and the axes' ends."""
    series = {
        "winner": [(r.M, r.latency_us) for r in shape.rows if r.latency_us],
        "default config": [(r.M, r.default_latency_us) for r in shape.rows if r.default_latency_us],
    }
    if not series["winner"]:
        return None
    xs = [x for points in series.values() for x, _ in points]
    ys = [y for points in series.values() for _, y in points]
    x_lo, x_hi = min(xs), max(max(xs), 2 * min(xs))
    y_lo, y_hi = min(ys) / 1.25, max(ys) * 1.25
    lines = {
        name: [
            (_scale(x, x_lo, x_hi, WIDTH), round(HEIGHT - _scale(y, y_lo, y_hi, HEIGHT), 1), x, y)
            for x, y in points
        ]
        for name, points in series.items()
    }
    return {"lines": lines, "x": (x_lo, x_hi), "y": (y_lo, y_hi), "w": WIDTH, "h": HEIGHT}


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
    f = None
    if not cpu and r.latency_us is not None and 0 < r.latency_us < math.inf:
        f = shape_roofline(key, r.M, r.latency_us, out_dtype=out_dtype)
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
        "chart": _chart(shape),
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
    advice = [*device_advice(device_name, [compute_capability or ""]).lines(), facts[0]]
    return PAGES.get_template("report.html").render(
        device=device_name,
        version=tuner.__version__,
        out_dtype=out_dtype,
        cpu=cpu,
        imported_only=imported_only,
        scope=scope,
        shapes=[_shape(s, bytes_dtype, cpu) for s in shapes],
        imports=imports,
        advice=advice,
        facts=[line[2:] for line in facts[1:] if line[2:] not in advice],  # the read rule once
        run=comparison,
        comparisons=_comparison_tables(comparison) if comparison else [],
        env_columns=ENV_COLUMNS.split(),
        environments=environments,
        abs=[info for info in abs_ if info.result],
    )
