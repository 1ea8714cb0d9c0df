"""The HTML report of a device: per shape, winner and default latency over M, speedup, achieved
bandwidth and throughput (and their share of the device's measured ceilings), coverage gaps, and
the versions tuned with (pure; no store access)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape

from api.report_tables import HASH_SHOWN, env_cell, imports_section
from api.svg import Series, line_chart
from db.repo import ImportInfo
from tuner.core import REQUIRED_M, VLLM_M_GRID
from tuner.kernels.config import KernelConfig
from tuner.kernels.registry import get_family
from tuner.kernels.shape import PER_TENSOR, FamilyShape, ShapeKeyed
from tuner.measure.roofline import COPY_GBPS, FP8_MM_TFLOPS, OUT_BYTES, Roofline
from tuner.measure.shape_roofline import shape_roofline

WINNER_COLOR, DEFAULT_COLOR, SPEEDUP_COLOR = "#1f6feb", "#cf222e", "#1a7f37"
COPY_COLOR, MM_COLOR = "#8250df", "#bc4c00"
_X_TICKS = [1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0]
_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px; color: #1f2328; background: #fff; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 28px 0 6px; }
.meta, .note { color: #59636e; } .gap { color: #9a6700; }
.charts { display: flex; flex-wrap: wrap; gap: 12px; }
table { border-collapse: collapse; margin-top: 8px; font-variant-numeric: tabular-nums; }
th, td { border-bottom: 1px solid #d1d9e0; padding: 3px 9px; text-align: right; }
th { background: #f6f8fa; } td.l, th.l { text-align: left; }
svg .title { font: 600 13px system-ui, sans-serif; }
svg .tick { font: 11px system-ui; fill: #59636e; }
svg .label { font: 12px system-ui; fill: #1f2328; } svg .legend { font: 12px system-ui; }
svg .grid { stroke: #eaeef2; } svg .frame { fill: none; stroke: #8c959f; }
svg .reference { stroke: #59636e; stroke-dasharray: 3 3; }
svg .reference-label { font: italic 11px system-ui; fill: #59636e; }
td.hash code { font-size: 12px; }
"""


@dataclass(frozen=True)
class ReportRow:
    """One M of a shape: the winner and the default config's median latency (ok trials)."""

    M: int
    config: dict[str, int] | None
    latency_us: float | None
    default_latency_us: float | None
    is_default: bool
    imported_from: str | None = None
    # A winner kept by a decision after interleaved re-timing: the spread (microseconds) it had
    # to beat, and why it was kept ("fastest", "default" or "simpler") with the decision's note.
    decided: bool = False
    spread_us: float | None = None
    kept: str | None = None
    kept_note: str | None = None
    # An imported entry left out because it cannot launch on the device (`tuner import`'s
    # launch check): why.
    left_out: str | None = None


@dataclass(frozen=True)
class ShapeReport(ShapeKeyed):
    """One shape of the device (`key`: its kernel family, N, K, block_shape and the family's
    params, e.g. E=128, top_k=8 for fused MoE); `m_stale`: M whose trials are all stale;
    `left_out`: (M, label, reason) of imported entries that cannot launch on the device."""

    key: FamilyShape
    m_requested: tuple[int, ...]
    rows: tuple[ReportRow, ...]
    models: tuple[str, ...]
    m_stale: tuple[int, ...] = ()
    left_out: tuple[tuple[int, str, str], ...] = ()

    @property
    def label(self) -> str:
        """The section's heading, as the family labels its shapes (`KernelFamily.shape_label`):
        "N=.., K=.." for the dense GEMM, "MoE E=.., N=.., K=.. (top_k=..)" for fused MoE."""
        return get_family(self.family).shape_label(self.key.shape)

    @property
    def anchor(self) -> str:
        """The section's id suffix, unique per file (`KernelFamily.shape_anchor`)."""
        return get_family(self.family).shape_anchor(self.key.shape)


@dataclass(frozen=True)
class ReportScope:
    """Which trials the winners come from: those of `kernel_hash` and Triton `triton_minor`
    (None: any), `stale_trials` ok trials of other versions left out; or every trial
    (`allow_stale`)."""

    allow_stale: bool
    kernel_hash: str | None = None
    triton_minor: str | None = None
    stale_trials: int = 0


def _emitted(row: ReportRow) -> str:
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
    if row.latency_us >= row.default_latency_us:
        return "default (winner not faster)"
    return "winner"


def _decision(row: ReportRow) -> str:
    if not row.decided:
        return "-"
    if row.kept is None:
        return "re-timed"
    return f"kept {row.kept}: {row.kept_note}" if row.kept_note else f"kept {row.kept}"


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def usable_ceilings(ceilings: Mapping[str, object] | None) -> dict[str, float]:
    """The ceilings a report can use: the known keys whose values are positive finite numbers.

    Args:
        ceilings: as the store returns them (db.repo.device_ceilings), or None.

    Returns:
        A subset of {"copy_gbps": GB/s, "fp8_mm_tflops": TFLOP/s}; other keys and bad values
        are left out, so a bad row in the store never breaks the page.
    """
    usable: dict[str, float] = {}
    for key in (COPY_GBPS, FP8_MM_TFLOPS):
        value = (ceilings or {}).get(key)
        if (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isfinite(value)
            and value > 0
        ):
            usable[key] = float(value)
    return usable


def _figures(
    row: ReportRow, shape: ShapeReport, out_dtype: str, ceilings: Mapping[str, float]
) -> Roofline | None:
    if row.latency_us is None or not (math.isfinite(row.latency_us) and row.latency_us > 0):
        return None
    # Only a family whose calls are one GEMM has a roofline (`FamilyReport.roofline_gemm`).
    return shape_roofline(shape.key, row.M, row.latency_us, ceilings, out_dtype=out_dtype)


def _pct(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio * 100:.1f}%"


def _latency_chart(measured: list[ReportRow], key: str, label: str) -> str:
    """The winner's and the default config's latency over M, both axes log scale."""
    winner = Series(
        "winner",
        WINNER_COLOR,
        tuple((r.M, r.latency_us) for r in measured if r.latency_us is not None),
    )
    default = Series(
        "default config",
        DEFAULT_COLOR,
        tuple((r.M, r.default_latency_us) for r in measured if r.default_latency_us is not None),
        dashed=True,
    )
    return line_chart(
        [winner, default],
        title=f"latency_us over M (log scales), {label}",
        x_label="M (rows of A)",
        y_label="latency_us",
        y_log=True,
        x_ticks=_X_TICKS,
        css_class=f"chart latency shape-{key}",
    )


def _speedup_chart(measured: list[ReportRow], key: str, label: str) -> str:
    """Default latency / winner latency over M, at the M where both were measured."""
    speedups = tuple(
        (r.M, r.default_latency_us / r.latency_us)
        for r in measured
        if r.default_latency_us is not None and r.latency_us is not None
    )
    return line_chart(
        [Series("speedup over default", SPEEDUP_COLOR, speedups)],
        title=f"speedup over vLLM's default config, {label}",
        x_label="M (rows of A)",
        y_label="default / winner",
        y_log=False,
        x_ticks=_X_TICKS,
        reference_y=1.0,
        reference_label="1.0 = as fast as the default (reference, not data)",
        css_class=f"chart speedup shape-{key}",
    )


def _ceilings_chart(
    figures: Mapping[int, Roofline | None], ceilings: Mapping[str, float], key: str, label: str
) -> str:
    """The winner's share (%) of each ceiling the device has, over M."""
    shares = [
        Series(
            name,
            color,
            tuple(
                (M, getattr(f, field) * 100)
                for M, f in figures.items()
                if f is not None and getattr(f, field) is not None
            ),
        )
        for name, color, field, ceiling in (
            ("% of copy bandwidth", COPY_COLOR, "copy_ratio", COPY_GBPS),
            ("% of FP8 mm throughput", MM_COLOR, "fp8_mm_ratio", FP8_MM_TFLOPS),
        )
        if ceiling in ceilings
    ]
    return line_chart(
        shares,
        title=f"winner's share of the device's ceilings, {label}",
        x_label="M (rows of A)",
        y_label="% of ceiling",
        y_log=False,
        x_ticks=_X_TICKS,
        reference_y=100.0,
        reference_label="100% = the ceiling (reference, not data)",
        css_class=f"chart roofline shape-{key}",
    )


def _charts(
    shape: ShapeReport,
    measured: list[ReportRow],
    figures: Mapping[int, Roofline | None],
    ceilings: Mapping[str, float],
) -> list[str]:
    """The latency and speedup charts over M, and the share of the ceilings when measured."""
    if not measured:
        return []
    key, label = shape.anchor, shape.label
    charts = [_latency_chart(measured, key, label), _speedup_chart(measured, key, label)]
    if ceilings:
        charts.append(_ceilings_chart(figures, ceilings, key, label))
    return charts


def _coverage_notes(shape: ShapeReport, done: set[int]) -> list[str]:
    """The M grid and its gaps: M without a winner (stale-only ones named), vLLM's required M
    without one, imported entries left out, vLLM's grid M not tuned."""
    imported = {
        r.M: r.imported_from
        for r in shape.rows
        if r.latency_us is None and r.config is not None and r.left_out is None
    }
    in_file = done | set(imported)
    gaps = [M for M in shape.m_requested if M not in done]
    lacking = [M for M in REQUIRED_M if M not in in_file]
    grid_missing = [M for M in VLLM_M_GRID if M not in done]
    labels = ", ".join(
        escape(repr(label))
        for label in sorted({label for label in imported.values() if label is not None})
    )
    notes = [
        f"M grid requested: {', '.join(map(str, shape.m_requested)) or 'none'}; "
        f"measured winners for {len(done)} M"
        + (
            f"; imported entries, not measured, for {len(imported)} M (from {labels})."
            if imported
            else "."
        )
    ]
    if gaps:
        notes.append(
            f'<span class="gap">Coverage gaps: no winner yet for M = '
            f"{', '.join(map(str, gaps))}.</span>"
        )
    if lacking:
        # M <= 32 is decode and small batches, M >= 2048 prefill (as tuner compare splits them).
        kinds = [
            f"{', '.join(map(str, group))} ({kind})"
            for group, kind in (
                ([M for M in lacking if M <= 32], "decode, small batches"),
                ([M for M in lacking if M >= 2048], "prefill"),
            )
            if group
        ]
        notes.append(
            f'<span class="gap">No {"entry" if imported else "winner"} for M = '
            f"{'; '.join(kinds)}: vLLM will use the nearest key there.</span>"
        )
    stale = [M for M in gaps if M in shape.m_stale]
    if stale:
        notes.append(
            f'<span class="gap">M = {", ".join(map(str, stale))} only have trials of '
            "another kernel or Triton (?allow_stale=true shows them).</span>"
        )
    for M, label, reason in shape.left_out:
        notes.append(
            f'<span class="gap">M={M}: entry imported from {escape(repr(label))} left '
            f"out, it cannot launch on this device: {escape(reason)}.</span>"
        )
    if grid_missing and not gaps and done:
        notes.append(f"Not tuned from vLLM's 18-value grid: {', '.join(map(str, grid_missing))}.")
    return notes


def _table_row(
    r: ReportRow, f: Roofline | None, ceilings: Mapping[str, float], cpu: bool = False
) -> str:
    """One M's row: winner config, both latencies, speedup, throughput ("-" on the
    interpreter, `cpu`: its rates say nothing of a GPU), shares of the ceilings (when
    measured), what the file holds, spread and decision."""
    if cpu:
        f = None
    speedup = r.default_latency_us / r.latency_us if r.latency_us and r.default_latency_us else None
    config = (
        KernelConfig.from_dict(r.config).short()
        if r.config and all(k in r.config for k in ("num_stages", "BLOCK_SIZE_M"))
        else "-"
    )
    shares_cells = (
        ""
        if not ceilings
        else (
            f"<td>{_pct(None if f is None else f.copy_ratio)}</td>"
            f"<td>{_pct(None if f is None else f.fp8_mm_ratio)}</td>"
            f"<td class=l>{(f and f.bound) or '-'}</td>"
        )
    )
    return (
        f"<tr><td>{r.M}</td><td class=l>{escape(config)}</td><td>{_num(r.latency_us)}</td>"
        f"<td>{_num(r.default_latency_us)}</td>"
        f"<td>{'-' if speedup is None else f'{speedup:.2f}x'}</td>"
        f"<td>{_num(None if f is None else f.gbps)}</td>"
        f"<td>{_num(None if f is None else f.tflops, 2)}</td>{shares_cells}"
        f"<td class=l>{escape(_emitted(r))}</td><td>{_num(r.spread_us, 2)}</td>"
        f"<td class=l>{escape(_decision(r))}</td></tr>"
    )


def _blocks(block_shape: tuple[int, int] | None) -> str:
    """How a section's heading names a block shape: "block_shape [128, 128]", or per-tensor."""
    if block_shape is None:
        return PER_TENSOR
    return f"block_shape [{block_shape[0]}, {block_shape[1]}]"


def _shape_section(
    shape: ShapeReport, out_dtype: str, cpu: bool, ceilings: Mapping[str, float]
) -> str:
    measured = [r for r in shape.rows if r.latency_us is not None]
    figures = {r.M: _figures(r, shape, out_dtype, ceilings) for r in shape.rows}
    charts = _charts(shape, measured, figures, ceilings)
    notes = _coverage_notes(shape, {r.M for r in measured})
    rows = [_table_row(r, figures[r.M], ceilings, cpu) for r in shape.rows]
    shares_head = "<th>% copy BW</th><th>% FP8 mm</th><th class=l>bound</th>" if ceilings else ""
    models = f" ({escape(', '.join(shape.models))})" if shape.models else ""
    return (
        f'<section class="shape" id="shape-{shape.anchor}"><h2>{shape.label}, '
        f"{_blocks(shape.block_shape)}{models}</h2>"
        + "".join(f'<p class="note">{n}</p>' for n in notes)
        + (
            f'<div class="charts">{"".join(charts)}</div>'
            if charts
            else '<p class="note nochart">No measured winner for this shape yet: no chart.</p>'
        )
        + f"<table><tr><th>M</th><th class=l>winner config</th><th>latency_us</th>"
        f"<th>default_us</th><th>speedup</th><th>GB/s</th><th>TFLOP/s</th>{shares_head}"
        f"<th class=l>in the file</th><th>spread_us</th><th class=l>decision</th></tr>"
        f"{''.join(rows)}</table></section>"
    )


def _ceilings_note(ceilings: Mapping[str, float]) -> str:
    if not ceilings:
        return (
            '<p class="note">No ceilings measured for this device yet (copy bandwidth, FP8 '
            "matrix-product throughput): no % columns.</p>"
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
    ridge = ""
    if len(ceilings) == 2:
        ridge = (
            f" The ridge is at {ceilings[FP8_MM_TFLOPS] * 1e3 / ceilings[COPY_GBPS]:,.0f} "
            "flops per byte: below it a call is memory-bound, above it compute-bound."
        )
    return (
        f'<p class="note" id="ceilings">Ceilings measured on this device: '
        f"{'; '.join(parts)}. % columns are the winner's achieved bandwidth and throughput "
        f"over them.{ridge}</p>"
    )


def _scope_note(scope: ReportScope) -> str:
    if scope.allow_stale:
        return (
            '<p class="note" id="scope">Winners from the trials of every kernel source and '
            "Triton version (?allow_stale=true).</p>"
        )
    kernel = escape((scope.kernel_hash or "any")[:HASH_SHOWN])
    triton = escape(scope.triton_minor or "any")
    left_out = (
        f"{scope.stale_trials} ok trial(s) of another kernel or Triton left out "
        "(?allow_stale=true includes them)."
        if scope.stale_trials
        else "no ok trials of other versions were left out."
    )
    return (
        f'<p class="note" id="scope">Winners from the trials of the current kernel source '
        f"(kernel {kernel}) and Triton {triton} only; {left_out}</p>"
    )


def render_report(
    device_name: str,
    shapes: Sequence[ShapeReport],
    environments: Sequence[Mapping[str, object]],
    *,
    version: str,
    out_dtype: str | None,
    ceilings: Mapping[str, object] | None = None,
    scope: ReportScope | None = None,
    backends: str = "",
    imports: Sequence[ImportInfo] = (),
    imported_only: str | None = None,
) -> str:
    """The whole HTML page.

    Args:
        device_name: vLLM's device key.
        shapes: per (N, K, block_shape): rows by M, requested grid, models.
        environments: the versions trials ran with (db.repo.EnvironmentRow as dicts).
        version: this tuner's version.
        out_dtype: the output dtype the winners were filtered by, if any.
        ceilings: the device's measured ceilings, {"copy_gbps": GB/s, "fp8_mm_tflops":
            TFLOP/s} (db.repo.device_ceilings); with them the tables get % of each ceiling and
            the bound, and each shape a chart of those % over M.
        scope: which trials the winners come from (kernel hash, Triton major.minor, stale
            trials left out); None leaves that note out.
        backends: the HTML section on which kernel vLLM runs (api.report_backends), placed
            before the versions.
        imports: the device's imported files (db.repo.list_imports), listed in their own
            section with their labels and the entries the launch check left out.
        imported_only: for a device with imported files and no sweeps, the line saying so
            (api.routes.devices.imported_only_note); None otherwise.

    Returns:
        A standalone HTML document (inline CSS and SVG, no script).
    """
    cpu = device_name == "TRITON_INTERPRETER"
    usable = usable_ceilings(ceilings)
    bytes_dtype = out_dtype if out_dtype in OUT_BYTES else "bfloat16"  # both are 2 bytes
    head = _page_head(
        device_name,
        len(shapes),
        version=version,
        out_dtype=out_dtype,
        cpu=cpu,
        imported_only=imported_only,
        scope=scope,
        ceilings=usable,
    )
    nav = " · ".join(f'<a href="#shape-{s.anchor}">{s.label}</a>' for s in shapes)
    body = [f"<nav>{nav}</nav>" if shapes else "<p>No shapes in the store for this device yet.</p>"]
    body += [_shape_section(s, bytes_dtype, cpu, usable) for s in shapes]
    body.append(imports_section(imports))
    body.append(backends)
    body.append(_environments_section(environments))
    return head + "".join(body) + "</body></html>\n"


def _page_head(
    device_name: str,
    n_shapes: int,
    *,
    version: str,
    out_dtype: str | None,
    cpu: bool,
    imported_only: str | None,
    scope: ReportScope | None,
    ceilings: Mapping[str, float],
) -> str:
    """The document's head, title and the notes above the shapes (interpreter timings,
    imported-only device, trial scope, ceilings)."""
    head = (
        f"<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{escape(device_name)}: block-FP8 GEMM tuning report</title>"
        f"<style>{_CSS}</style></head><body>"
        f"<h1>Block-FP8 GEMM tuning report: {escape(device_name)}</h1>"
        f'<p class="meta">blockfp8-tuner {escape(version)}; output dtype '
        f"{escape(out_dtype or 'all')}; {n_shapes} shape(s). Bandwidth counts the bytes "
        "of A, B, their scales and C once per call; throughput is 2·M·N·K per call.</p>"
    )
    if cpu:
        head += (
            '<p class="note">TRITON_INTERPRETER: CPU timings of the Triton interpreter, '
            'not GPU timings; GB/s and TFLOP/s show "-": the interpreter\'s rates say '
            "nothing of a GPU's.</p>"
        )
    if imported_only is not None:
        head += f'<p class="note" id="imported-only">{escape(imported_only)}.</p>'
    if scope is not None:
        head += _scope_note(scope)
    return head + _ceilings_note(ceilings)


def _environments_section(environments: Sequence[Mapping[str, object]]) -> str:
    """The table of versions the trials ran with, one row per environment."""
    cols = (
        "gpu_name",
        "compute_capability",
        "driver",
        "cuda",
        "torch",
        "triton",
        "vllm",
        "kernel_source",
        "tuner",
        "kernel_hash",
        "trials",
    )
    env_rows = "".join(
        "<tr>" + "".join(env_cell(c, str(env.get(c, "")) or "-") for c in cols) + "</tr>"
        for env in environments
    )
    return (
        '<section id="environments"><h2>Versions tuned with</h2><table><tr>'
        + "".join(f"<th class=l>{c}</th>" for c in cols)
        + f"</tr>{env_rows}</table>"
        + ("" if environments else "<p>No trials yet.</p>")
        + "</section>"
    )
