"""The HTML report of a device (pure; no store access): per shape, winner and default latency
over M, speedup, achieved bandwidth and throughput (and their share of the device's measured
ceilings), coverage gaps; the imported files, which kernel vLLM runs, and the versions tuned
with."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from html import escape

from api.svg import Series, line_chart
from db.repo import ComparisonInfo, ImportInfo, PointRow
from tuner.core import REQUIRED_M, VLLM_M_GRID
from tuner.files.device import Scope
from tuner.inputs.backends import backend_lines, device_advice
from tuner.kernels.config import KernelConfig
from tuner.kernels.registry import get_family
from tuner.kernels.shape import FamilyShape, ShapeKeyed, block_shape_text
from tuner.measure.roofline import COPY_GBPS, FP8_MM_TFLOPS, OUT_BYTES, Roofline, shape_roofline

X_TICKS = [1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0]
REFERENCES = {
    "speedup": "1.0 = as fast as the default (reference, not data)",
    "roofline": "100% = the ceiling (reference, not data)",
}
HASH_SHOWN = 12  # hex digits of a kernel hash shown (the cell's title holds all 64)
ENV_COLUMNS = (
    "gpu_name compute_capability driver cuda torch triton vllm kernel_source tuner kernel_hash "
    "trials"
).split()
CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px; color: #1f2328; background: #fff; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 28px 0 6px; }
.meta, .note { color: #59636e; } .gap { color: #9a6700; }
.charts { display: flex; flex-wrap: wrap; gap: 12px; }
table { border-collapse: collapse; margin-top: 8px; font-variant-numeric: tabular-nums; }
th, td { border-bottom: 1px solid #d1d9e0; padding: 3px 9px; text-align: right; }
th { background: #f6f8fa; } td.l, th.l { text-align: left; } td.hash code { font-size: 12px; }
svg .title { font: 600 13px system-ui, sans-serif; }
svg .tick { font: 11px system-ui; fill: #59636e; }
svg .label { font: 12px system-ui; fill: #1f2328; } svg .legend { font: 12px system-ui; }
svg .grid { stroke: #eaeef2; } svg .frame { fill: none; stroke: #8c959f; }
svg .reference { stroke: #59636e; stroke-dasharray: 3 3; }
svg .reference-label { font: italic 11px system-ui; fill: #59636e; }
"""


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
class ShapeReport(ShapeKeyed):
    """One shape of the device (`key`: its family, N, K, block_shape and the family's params);
    `m_stale`: M whose trials are all stale; `left_out`: (M, label, reason) of imported entries
    that cannot launch on the device."""

    key: FamilyShape
    m_requested: tuple[int, ...]
    rows: tuple[ReportRow, ...]
    models: tuple[str, ...]
    m_stale: tuple[int, ...] = ()
    left_out: tuple[tuple[int, str, str], ...] = ()

    @property
    def label(self) -> str:
        """The section's heading, as the family labels its shapes ("N=.., K=..")."""
        return get_family(self.family).shape_label(self.key.shape)

    @property
    def anchor(self) -> str:
        """The section's id suffix, unique per file."""
        return get_family(self.family).shape_anchor(self.key.shape)


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


class Html(str):
    """Markup already built: `_table` does not escape it."""


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _pct(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio * 100:.1f}%"


def _table(heads: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A table; a heading "l:name" left-aligns its column. Cells are escaped text, or `Html`
    (a whole `<td ...>` element)."""
    left = [h.startswith("l:") for h in heads]
    head = "".join(
        f"<th{' class=l' * lf}>{escape(h.removeprefix('l:'))}</th>"
        for h, lf in zip(heads, left, strict=True)
    )
    body = "".join(
        "<tr>"
        + "".join(
            c if isinstance(c, Html) else f"<td{' class=l' * lf}>{escape(str(c))}</td>"
            for c, lf in zip(row, left, strict=True)
        )
        + "</tr>"
        for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _note(text: str, id: str = "", cls: str = "note") -> str:
    return f'<p class="{cls}"' + (f' id="{id}"' if id else "") + f">{text}</p>"


def _gap(text: str) -> str:
    return f'<span class="gap">{text}</span>'


def _ms(values: Iterable[int]) -> str:
    return ", ".join(map(str, values))


def usable_ceilings(ceilings: Mapping[str, object] | None) -> dict[str, float]:
    """The known ceilings (db.repo.device_ceilings: {"copy_gbps": GB/s, "fp8_mm_tflops":
    TFLOP/s}) whose values are positive finite numbers: a bad row never breaks the page."""
    return {
        key: float(value)
        for key, value in (ceilings or {}).items()
        if key in (COPY_GBPS, FP8_MM_TFLOPS)
        and isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    }


def _points(pairs: Iterable[tuple[int, float | None]]) -> tuple[tuple[float, float], ...]:
    return tuple((M, value) for M, value in pairs if value is not None)


def _charts(
    shape: ShapeReport, figures: Mapping[int, Roofline], ceilings: Mapping[str, float]
) -> list[str]:
    """The latency and speedup charts over M, and the winner's share of each ceiling."""
    rows = [r for r in shape.rows if r.latency_us is not None]
    latency = [
        Series("winner", "#1f6feb", _points((r.M, r.latency_us) for r in rows)),
        Series(
            "default config", "#cf222e", _points((r.M, r.default_latency_us) for r in rows), True
        ),
    ]
    speedup = [Series("speedup over default", "#1a7f37", _points((r.M, r.speedup) for r in rows))]
    shares = [
        Series(
            name,
            color,
            _points((M, getattr(f, ratio) and getattr(f, ratio) * 100) for M, f in figures.items()),
        )
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
        line_chart(
            series,
            title=f"{title}, {shape.label}",
            y_label=y_label,
            y_log=kind == "latency",
            x_ticks=X_TICKS,
            reference=None if ref is None else (ref, REFERENCES[kind]),
            css_class=f"chart {kind} shape-{shape.anchor}",
        )
        for kind, title, y_label, series, ref in charts
        if rows and (kind != "roofline" or ceilings)
    ]


def _coverage_notes(shape: ShapeReport, done: set[int]) -> list[str]:
    """The M grid and its gaps: M without a winner (stale-only ones named), vLLM's required M
    without one (it uses the nearest key there; M <= 32 is decode and small batches, M >= 2048
    prefill, as tuner compare splits them), imported entries left out, vLLM's grid M not tuned."""
    imported = {
        r.M: r.imported_from
        for r in shape.rows
        if r.latency_us is None and r.config is not None and r.left_out is None
    }
    gaps = [M for M in shape.m_requested if M not in done]
    lacking = [M for M in REQUIRED_M if M not in done | set(imported)]
    labels = ", ".join(escape(repr(label)) for label in sorted({str(v) for v in imported.values()}))
    from_imports = f"; imported entries, not measured, for {len(imported)} M (from {labels})"
    notes = [
        f"M grid requested: {_ms(shape.m_requested) or 'none'}; "
        f"measured winners for {len(done)} M{from_imports if imported else ''}."
    ]
    if gaps:
        notes.append(_gap(f"Coverage gaps: no winner yet for M = {_ms(gaps)}."))
    groups = [
        f"{_ms(group)} ({name})"
        for group, name in (
            ([M for M in lacking if M <= 32], "decode, small batches"),
            ([M for M in lacking if M >= 2048], "prefill"),
        )
        if group
    ]
    if lacking:
        kind = "entry" if imported else "winner"
        notes.append(
            _gap(f"No {kind} for M = {'; '.join(groups)}: vLLM will use the nearest key there.")
        )
    stale = [M for M in gaps if M in shape.m_stale]
    if stale:
        notes.append(
            _gap(
                f"M = {_ms(stale)} only have trials of another kernel or Triton "
                "(?allow_stale=true shows them)."
            )
        )
    notes += [
        _gap(
            f"M={M}: entry imported from {escape(repr(label))} left out, it cannot launch on "
            f"this device: {escape(reason)}."
        )
        for M, label, reason in shape.left_out
    ]
    grid_missing = [M for M in VLLM_M_GRID if M not in done]
    if grid_missing and not gaps and done:
        notes.append(f"Not tuned from vLLM's 18-value grid: {_ms(grid_missing)}.")
    return notes


def _cells(r: ReportRow, f: Roofline | None, ceilings: Mapping[str, float]) -> list[str]:
    """One M: winner config, both latencies, speedup, throughput, shares of the ceilings (when
    measured), what the file holds, spread and decision."""
    config = r.config or {}
    known = {"num_stages", "BLOCK_SIZE_M"} <= set(config)
    short = KernelConfig.from_dict(config).short() if known else "-"
    gbps, tflops, copy, mm, bound = (
        (f.gbps, f.tflops, f.copy_ratio, f.fp8_mm_ratio, f.bound) if f else (None,) * 5
    )
    speedup = "-" if r.speedup is None else f"{r.speedup:.2f}x"
    shares = [_pct(copy), _pct(mm), bound or "-"] if ceilings else []
    rates = [_num(gbps), _num(tflops, 2), *shares]
    times = [_num(r.latency_us), _num(r.default_latency_us), speedup]
    return [str(r.M), short, *times, *rates, _emitted(r), _num(r.spread_us, 2), _decision(r)]


SHAPE_HEADS = "M|l:winner config|latency_us|default_us|speedup|GB/s|TFLOP/s".split("|")
SHARE_HEADS = ["% copy BW", "% FP8 mm", "l:bound"]
TAIL_HEADS = ["l:in the file", "spread_us", "l:decision"]


def _shape_section(
    shape: ShapeReport, out_dtype: str, cpu: bool, ceilings: Mapping[str, float]
) -> str:
    """A shape's heading, notes, charts and table. Rates are "-" on the interpreter (`cpu`):
    its rates say nothing of a GPU's."""
    figures = {
        r.M: shape_roofline(shape.key, r.M, r.latency_us, ceilings, out_dtype=out_dtype)
        for r in shape.rows
        if r.latency_us is not None and math.isfinite(r.latency_us) and r.latency_us > 0
    }
    charts = _charts(shape, {M: f for M, f in figures.items() if f is not None}, ceilings)
    done = {r.M for r in shape.rows if r.latency_us is not None}
    heads = SHAPE_HEADS + (SHARE_HEADS if ceilings else []) + TAIL_HEADS
    rows = [_cells(r, None if cpu else figures.get(r.M), ceilings) for r in shape.rows]
    models = f" ({escape(', '.join(shape.models))})" if shape.models else ""
    blocks = ("block_shape " if shape.block_shape else "") + block_shape_text(shape.block_shape)
    return (
        f'<section class="shape" id="shape-{shape.anchor}"><h2>{shape.label}, {blocks}{models}</h2>'
        + "".join(map(_note, _coverage_notes(shape, done)))
        + (
            f'<div class="charts">{"".join(charts)}</div>'
            if charts
            else _note("No measured winner for this shape yet: no chart.", cls="note nochart")
        )
        + _table(heads, rows)
        + "</section>"
    )


def _ceilings_note(ceilings: Mapping[str, float]) -> str:
    if not ceilings:
        return _note(
            "No ceilings measured for this device yet (copy bandwidth, FP8 matrix-product "
            "throughput): no % columns."
        )
    parts = []
    if COPY_GBPS in ceilings:
        parts.append(
            f"device-to-device copy {ceilings[COPY_GBPS]:,.0f} GB/s (bytes read plus written)"
        )
    if FP8_MM_TFLOPS in ceilings:
        parts.append(
            f"FP8 matrix product {ceilings[FP8_MM_TFLOPS]:,.1f} TFLOP/s "
            "(torch._scaled_mm, e4m3 inputs, per-tensor scales, bf16 output)"
        )
    ridge = (
        f" The ridge is at {ceilings[FP8_MM_TFLOPS] * 1e3 / ceilings[COPY_GBPS]:,.0f} flops per "
        "byte: below it a call is memory-bound, above it compute-bound."
        if len(ceilings) == 2
        else ""
    )
    return _note(
        f"Ceilings measured on this device: {'; '.join(parts)}. % columns are the winner's "
        f"achieved bandwidth and throughput over them.{ridge}",
        "ceilings",
    )


def _scope_note(scope: Scope) -> str:
    if scope.allow_stale:
        text = (
            "Winners from the trials of every kernel source and Triton version (?allow_stale=true)."
        )
        return _note(text, "scope")
    left_out = (
        f"{scope.stale_trials} ok trial(s) of another kernel or Triton left out "
        "(?allow_stale=true includes them)."
        if scope.stale_trials
        else "no ok trials of other versions were left out."
    )
    return _note(
        "Winners from the trials of the current kernel source "
        f"(kernel {escape(scope.current.kernel_hash[:HASH_SHOWN])}) and Triton "
        f"{escape(scope.current.triton_minor or 'any')} only; {left_out}",
        "scope",
    )


IMPORT_HEADS = "l:label|l:file|N|K|l:M keys|l:launch check|l:entries left out".split("|")


def imports_section(imports: Sequence[ImportInfo]) -> str:
    """The device's imported files: label, name, M keys, launch check and entries left out."""
    rows = [
        (
            i.label,
            i.file_name,
            i.N,
            i.K,
            _ms(i.m_keys),
            "not checked" if i.checked_arch is None else f"sm{i.checked_arch}",
            "; ".join(f"M={M}: {why}" for M, why in sorted(i.cannot_launch.items())) or "none",
        )
        for i in imports
    ]
    if not rows:
        return ""
    return (
        '<section id="imports"><h2>Imported files</h2><p class="note">Entries kept from '
        "existing files (<code>tuner import</code>), never measured here: they fill M "
        "without a measured winner; entries that cannot launch on the device are left "
        f"out.</p>{_table(IMPORT_HEADS, rows)}</section>"
    )


def _html(text: str) -> str:
    """Escaped text with its `code` spans as <code> (the facts are written for plain text)."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", escape(text, quote=False))


def _comparison_table(run: ComparisonInfo, N: int, K: int) -> str:
    points = [p for p in run.points if (p.N, p.K) == (N, K)]
    backends = list(dict.fromkeys(p.backend for p in points if p.status != "unavailable"))
    by = {(p.M, p.backend): p for p in points}

    def cell(p: PointRow | None) -> str:
        if p is None:
            return "-"
        value = f"{p.latency_us:.1f}" if p.status == "ok" else escape(p.status)
        return Html(f'<td title="{escape(p.note)}">{value}</td>')

    rows = [[M, *(cell(by.get((M, b))) for b in backends)] for M in sorted({p.M for p in points})]
    return f"<h3>N={N}, K={K}: latency_us</h3>{_table(['M', *backends], rows)}"


def _ul(items: Iterable[str]) -> str:
    return "<ul>" + "".join(f"<li>{item}</li>" for item in items) + "</ul>"


def backends_section(
    device_name: str, compute_capability: str | None, comparisons: Sequence[ComparisonInfo]
) -> str:
    """Whether vLLM 0.33.0 reads this device's files, which kernel it runs per architecture
    (this device's marked when its compute capability is known), then the newest `tuner
    compare` run's verdicts and tables (`comparisons`, newest first)."""
    advice = device_advice(device_name, [compute_capability or ""]).lines()
    facts = backend_lines(compute_capability)
    html = (
        '<section id="backends"><h2>Which kernel vLLM runs</h2>'
        + "".join(f"<p>{_html(line)}</p>" for line in [*advice, facts[0]])
        + _ul(_html(line[2:]) for line in facts[1:])
    )
    if not comparisons:
        return html + "<p>No <code>tuner compare</code> run for this device yet.</p></section>"
    run = comparisons[0]
    kernel = f"vLLM {run.vllm}'s" if run.kernel_source == "vllm" else "the builtin"
    return (
        html + f"<p>Latest <code>tuner compare</code>: {escape(run.model)} TP {run.tp} on "
        f"{escape(run.gpu_name)}, {escape(run.created_at.isoformat())}; the "
        f"Triton columns timed {escape(kernel)} Triton kernel.</p>"
        + _ul(map(escape, run.verdicts))
        + "".join(
            _comparison_table(run, N, K) for N, K in dict.fromkeys((p.N, p.K) for p in run.points)
        )
        + "</section>"
    )


def _env_cell(column: str, env: Mapping[str, object]) -> str:
    """A cell of the versions table; the kernel hash shortened, whole in its title."""
    value = str(env.get(column, "")) or "-"
    if column == "kernel_hash" and len(value) > HASH_SHOWN:
        short = escape(value[:HASH_SHOWN])
        return Html(f'<td class="l hash" title="{escape(value)}"><code>{short}</code></td>')
    return value


def _environments_section(environments: Sequence[Mapping[str, object]]) -> str:
    """The versions the trials ran with, one row per environment."""
    rows = [[_env_cell(c, env) for c in ENV_COLUMNS] for env in environments]
    return (
        '<section id="environments"><h2>Versions tuned with</h2>'
        + _table([f"l:{c}" for c in ENV_COLUMNS], rows)
        + ("" if environments else "<p>No trials yet.</p>")
        + "</section>"
    )


CPU_NOTE = _note(
    "TRITON_INTERPRETER: CPU timings of the Triton interpreter, not GPU timings; "
    "GB/s and TFLOP/s show \"-\": the interpreter's rates say nothing of a GPU's."
)


def render_report(
    device_name: str,
    shapes: Sequence[ShapeReport],
    environments: Sequence[Mapping[str, object]],
    *,
    version: str,
    out_dtype: str | None,
    ceilings: Mapping[str, object] | None = None,
    scope: Scope | None = None,
    backends: str = "",
    imports: Sequence[ImportInfo] = (),
    imported_only: str | None = None,
) -> str:
    """The whole page: a standalone HTML document (inline CSS and SVG, no script).

    `environments` are the versions trials ran with (db.repo.EnvironmentRow as dicts);
    `ceilings` the device's measured ceilings (db.repo.device_ceilings), which add % of each
    and the bound to the tables and a chart of those %; `scope` which trials the winners come
    from (None: no note); `backends` the section on which kernel vLLM runs
    (`backends_section`); `imported_only` the line for a device with imported files only.
    """
    cpu = device_name == "TRITON_INTERPRETER"
    usable = usable_ceilings(ceilings)
    name = escape(device_name)
    nav = " · ".join(f'<a href="#shape-{s.anchor}">{s.label}</a>' for s in shapes)
    bytes_dtype = out_dtype if out_dtype in OUT_BYTES else "bfloat16"  # both are 2 bytes
    return (
        f"<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{name}: block-FP8 GEMM tuning report</title><style>{CSS}</style></head><body>"
        f"<h1>Block-FP8 GEMM tuning report: {name}</h1>"
        f'<p class="meta">blockfp8-tuner {escape(version)}; output dtype '
        f"{escape(out_dtype or 'all')}; {len(shapes)} shape(s). Bandwidth counts the bytes "
        "of A, B, their scales and C once per call; throughput is 2·M·N·K per call.</p>"
        + (CPU_NOTE if cpu else "")
        + (_note(f"{escape(imported_only)}.", "imported-only") if imported_only else "")
        + ("" if scope is None else _scope_note(scope))
        + _ceilings_note(usable)
        + (f"<nav>{nav}</nav>" if shapes else "<p>No shapes in the store for this device yet.</p>")
        + "".join(_shape_section(s, bytes_dtype, cpu, usable) for s in shapes)
        + imports_section(imports)
        + backends
        + _environments_section(environments)
        + "</body></html>\n"
    )
