"""The HTML report of a device (templates/report.html): per shape, the winner's and the default's
latency over M, speedup, achieved bandwidth and throughput (and their share of the device's
measured ceilings), coverage gaps; the imported files, which kernel vLLM runs, and the versions
tuned with."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from markupsafe import Markup
from sqlalchemy.orm import Session

from api.svg import Series, line_chart
from api.templates import PAGES
from db import repo
from tuner.core import REQUIRED_M, VLLM_M_GRID, ComparisonStatus
from tuner.files.device import DeviceView, Scope
from tuner.files.merge import import_targets
from tuner.inputs.backends import backend_lines, device_advice
from tuner.kernels.config import KernelConfig
from tuner.kernels.registry import get_family
from tuner.kernels.shape import FamilyShape, block_shape_text
from tuner.measure.roofline import COPY_GBPS, FP8_MM_TFLOPS, OUT_BYTES, Roofline, shape_roofline

REFERENCES = {
    "speedup": "1.0 = as fast as the default (reference, not data)",
    "roofline": "100% = the ceiling (reference, not data)",
}
CEILINGS = (COPY_GBPS, FP8_MM_TFLOPS)
X_TICKS = [1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0]
SHAPE_HEADS = "M|l:winner config|latency_us|default_us|speedup|GB/s|TFLOP/s".split("|")
SHARE_HEADS = ["% copy BW", "% FP8 mm", "l:bound"]
TAIL_HEADS = ["l:in the file", "spread_us", "l:decision"]
ENV_COLUMNS = "gpu_name compute_capability driver cuda torch triton vllm kernel_source tuner"


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


def _winner_row(session: Session, w: repo.WinnerRow) -> ReportRow:
    """A winner; a decided one with its spread and why it was kept (a query per decision)."""
    decision = repo.task_decision(session, task_id=w.task_id) if w.decided else None
    return ReportRow(
        *(w.M, w.config, w.latency_us, w.default_latency_us, w.is_default),
        decided=w.decided,
        spread_us=w.spread_us if w.decided else None,
        kept=decision.kept if decision else None,
        kept_note=decision.note if decision else None,
    )


def report_shapes(session: Session, view: DeviceView) -> list[ShapeReport]:
    """One section per shape with a winner, an M grid or imported entries, in shape order: its
    rows by M (measured winners, else imported entries, else those the launch check left out)."""
    coverage = {FamilyShape.of_row(c): c for c in view.coverage}
    rows: dict[FamilyShape, dict[int, ReportRow]] = {}
    for w in view.winners:
        rows.setdefault(FamilyShape.of_row(w), {})[w.M] = _winner_row(session, w)
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


def _num(value: float | None, digits: int = 1, scale: float = 1.0, unit: str = "") -> str:
    return "-" if value is None else f"{value * scale:,.{digits}f}{unit}"


def _ms(values: Iterable[int]) -> str:
    return ", ".join(map(str, values))


def usable_ceilings(ceilings: Mapping[str, float] | None) -> dict[str, float]:
    """The known ceilings (db.repo.device_ceilings: {"copy_gbps": GB/s, "fp8_mm_tflops":
    TFLOP/s}) whose values are positive finite numbers: a bad row never breaks the page."""
    known = {key: value for key, value in (ceilings or {}).items() if key in CEILINGS}
    return {key: float(value) for key, value in known.items() if 0 < float(value) < math.inf}


def _charts(
    shape: ShapeReport, figures: Mapping[int, Roofline], ceilings: Mapping[str, float]
) -> list[Markup]:
    """The latency and speedup charts over M, and the winner's share of each ceiling."""
    rows = [r for r in shape.rows if r.latency_us is not None]

    def series(name: str, color: str, pairs: Iterable, dashed: bool = False) -> Series:
        return Series(name, color, tuple((M, y) for M, y in pairs if y is not None), dashed)

    latency = [
        series("winner", "#1f6feb", ((r.M, r.latency_us) for r in rows)),
        series("default config", "#cf222e", ((r.M, r.default_latency_us) for r in rows), True),
    ]
    speedup = [series("speedup over default", "#1a7f37", ((r.M, r.speedup) for r in rows))]
    shares = [
        series(name, color, ((M, _share(getattr(f, ratio))) for M, f in figures.items()))
        for name, color, ratio, ceiling in (
            ("% of copy bandwidth", "#8250df", "copy_ratio", COPY_GBPS),
            ("% of FP8 mm throughput", "#bc4c00", "fp8_mm_ratio", FP8_MM_TFLOPS),
        )
        if ceiling in ceilings
    ]
    charts = [
        ("latency", "latency_us over M (log scales)", "latency_us", latency, None),
        ("speedup", "speedup over vLLM's default config", "default / winner", speedup, 1.0),
        ("roofline", "winner's share of the device's ceilings", "% of ceiling", shares, 100.0),
    ]
    return [
        Markup(
            line_chart(
                lines,
                title=f"{title}, {shape.label}",
                y_label=y_label,
                y_log=kind == "latency",
                x_ticks=X_TICKS,
                reference=None if ref is None else (ref, REFERENCES[kind]),
                css_class=f"chart {kind} shape-{shape.anchor}",
            )
        )
        for kind, title, y_label, lines, ref in charts
        if rows and any(line.points for line in lines)
    ]


def _share(ratio: float | None) -> float | None:
    return None if ratio is None else ratio * 100


def _coverage(shape: ShapeReport, done: set[int]) -> dict:
    """What the notes on a shape's M grid say: its requested M, measured (`done`) and imported
    ones, M without a winner (`gaps`, the `stale`-only ones named), vLLM's required M without
    one (`lacking`: it uses the nearest key there; M <= 32 is decode and small batches, M >= 2048
    prefill, as tuner compare splits them) and vLLM's grid M not tuned."""
    imported = {r.M: r.imported_from for r in shape.rows if r.latency_us is None and r.config}
    gaps = [M for M in shape.m_requested if M not in done]
    lacking = [M for M in REQUIRED_M if M not in done | set(imported)]
    decode, prefill = [M for M in lacking if M <= 32], [M for M in lacking if M >= 2048]
    groups = ((decode, "decode, small batches"), (prefill, "prefill"))
    return {
        "requested": _ms(shape.m_requested) or "none",
        "done": len(done),
        "imported": len(imported),
        "labels": ", ".join(repr(label) for label in sorted({str(v) for v in imported.values()})),
        "gaps": _ms(gaps),
        "lacking": "; ".join(f"{ms} ({name})" for group, name in groups if (ms := _ms(group))),
        "stale": _ms(M for M in gaps if M in shape.m_stale),
        "grid_missing": _ms(M for M in VLLM_M_GRID if M not in done) if done and not gaps else "",
    }


def _cells(r: ReportRow, f: Roofline | None, ceilings: Mapping[str, float]) -> list[str]:
    """One M: winner config, both latencies, speedup, throughput, shares of the ceilings (when
    measured), what the file holds, spread and decision."""
    config = r.config or {}
    short = KernelConfig.from_dict(config).short() if "num_stages" in config else "-"
    rates = [_num(f.gbps), _num(f.tflops, 2)] if f else ["-", "-"]
    if ceilings and f:
        rates += [
            _num(f.copy_ratio, 1, 100, "%"),
            _num(f.fp8_mm_ratio, 1, 100, "%"),
            f.bound or "-",
        ]
    elif ceilings:
        rates += ["-", "-", "-"]
    times = [_num(r.latency_us), _num(r.default_latency_us), _num(r.speedup, 2, unit="x")]
    return [str(r.M), short, *times, *rates, _emitted(r), _num(r.spread_us, 2), _decision(r)]


def _shape(shape: ShapeReport, out_dtype: str, cpu: bool, ceilings: Mapping[str, float]) -> dict:
    """A shape's section: heading, notes, charts and table. Rates are "-" on the interpreter
    (`cpu`): its rates say nothing of a GPU's."""
    figures = {
        r.M: shape_roofline(shape.key, r.M, r.latency_us, ceilings, out_dtype=out_dtype)
        for r in shape.rows
        if r.latency_us is not None and math.isfinite(r.latency_us) and r.latency_us > 0
    }
    measured = {M: f for M, f in figures.items() if f is not None}
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
        "charts": _charts(shape, measured, ceilings),
        "heads": SHAPE_HEADS + (SHARE_HEADS if ceilings else []) + TAIL_HEADS,
        "rows": [_cells(r, None if cpu else figures.get(r.M), ceilings) for r in shape.rows],
    }


def _comparison_tables(run: repo.ComparisonInfo) -> list[tuple]:
    """Per (N, K) of a `tuner compare` run: (N, K, backends timed, {M: {backend: point}})."""
    tables = []
    for N, K in dict.fromkeys((p.N, p.K) for p in run.points):
        points = [p for p in run.points if (p.N, p.K) == (N, K)]
        by_m: dict[int, dict[str, repo.PointRow]] = {}
        for p in points:
            by_m.setdefault(p.M, {})[p.backend] = p
        backends = dict.fromkeys(
            p.backend for p in points if p.status != ComparisonStatus.UNAVAILABLE
        )
        tables.append((N, K, list(backends), dict(sorted(by_m.items()))))
    return tables


def render_report(
    device_name: str,
    shapes: Sequence[ShapeReport],
    environments: Sequence[Mapping[str, object]],
    *,
    version: str,
    out_dtype: str | None,
    ceilings: Mapping[str, float] | None = None,
    scope: Scope | None = None,
    compute_capability: str | None = None,
    comparison: repo.ComparisonInfo | None = None,
    imports: Sequence[repo.ImportInfo] = (),
    imported_only: str | None = None,
) -> str:
    """The whole page: a standalone HTML document (inline CSS and SVG, no script).

    `environments` are the versions trials ran with (db.repo.EnvironmentRow as dicts);
    `ceilings` the device's measured ceilings (db.repo.device_ceilings), which add % of each
    and the bound to the tables and a chart of those %; `scope` which trials the winners come
    from (None: no note); `compute_capability` marks the device's architecture among those vLLM
    runs other kernels on; `comparison` the newest `tuner compare` run; `imported_only` the line
    for a device with imported files only.
    """
    cpu = device_name == "TRITON_INTERPRETER"
    usable = usable_ceilings(ceilings)
    bytes_dtype = out_dtype if out_dtype in OUT_BYTES else "bfloat16"  # both are 2 bytes
    facts = backend_lines(compute_capability)
    return PAGES.get_template("report.html").render(
        device=device_name,
        version=version,
        out_dtype=out_dtype,
        cpu=cpu,
        imported_only=imported_only,
        scope=scope,
        ceilings=usable,
        shapes=[_shape(s, bytes_dtype, cpu, usable) for s in shapes],
        imports=imports,
        advice=[*device_advice(device_name, [compute_capability or ""]).lines(), facts[0]],
        facts=[line[2:] for line in facts[1:]],
        run=comparison,
        comparisons=_comparison_tables(comparison) if comparison else [],
        env_columns=ENV_COLUMNS.split(),
        environments=environments,
    )
