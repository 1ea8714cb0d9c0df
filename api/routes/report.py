"""The HTML report of a device: latency and speedup over M per shape, gaps, versions."""

from __future__ import annotations

from dataclasses import asdict

from fastapi import APIRouter
from fastapi.responses import HTMLResponse
from sqlalchemy.orm import Session

import tuner
from api.deps import SessionDep
from api.report import ReportRow, ReportScope, ShapeReport, render_report
from api.report_backends import backends_section
from api.routes.devices import AllowStale, KnownDevice, OutDtype, imported_only_note
from db import repo
from tuner.files.device import DeviceView, read_device
from tuner.files.merge import import_targets
from tuner.kernels.shape import FamilyShape

router = APIRouter(prefix="/devices", tags=["report"])


def _row(session: Session, winner: repo.WinnerRow) -> ReportRow:
    """A winner as a report row; a decided one with its spread and why it was kept (one query
    per decided winner: a report is read rarely)."""
    decision = repo.task_decision(session, task_id=winner.task_id) if winner.decided else None
    return ReportRow(
        M=winner.M,
        config=winner.config,
        latency_us=winner.latency_us,
        default_latency_us=winner.default_latency_us,
        is_default=winner.is_default,
        decided=winner.decided,
        spread_us=winner.spread_us if winner.decided else None,
        kept=decision.kept if decision else None,
        kept_note=decision.note if decision else None,
    )


def _imported_rows(rows: dict[int, ReportRow], extra: repo.ImportedShape | None) -> None:
    """Add to a shape's rows (M -> row) the imported entries at M without a measured winner:
    the configs that launch (marked not measured) and those the launch check left out."""
    if extra is None:
        return
    for M, config in extra.configs.items():
        if M not in rows:
            rows[M] = ReportRow(
                M=M,
                config=config,
                latency_us=None,
                default_latency_us=None,
                is_default=False,
                imported_from=extra.labels[M],
            )
    for M, (label, reason) in sorted(extra.left_out.items()):
        if M not in rows:
            rows[M] = ReportRow(
                M=M,
                config=None,
                latency_us=None,
                default_latency_us=None,
                is_default=False,
                imported_from=label,
                left_out=reason,
            )


def _shapes(session: Session, view: DeviceView) -> list[ShapeReport]:
    """One report section per shape with a winner, coverage or imported entries, in shape
    order: its rows by M (measured winners first, then imported entries at the other M) and
    its coverage."""
    coverage = {FamilyShape.of_row(c): c for c in view.coverage}
    by_shape: dict[FamilyShape, dict[int, ReportRow]] = {}
    for w in view.winners:
        by_shape.setdefault(FamilyShape.of_row(w), {})[w.M] = _row(session, w)
    imported = import_targets(set(by_shape) | set(coverage), view.imported, view.device_name)
    shapes = []
    for key in sorted(set(by_shape) | set(coverage) | set(imported)):
        rows = by_shape.get(key, {})
        extra = imported.get(key)
        _imported_rows(rows, extra)
        left_out = sorted(extra.left_out.items()) if extra else []
        cov = coverage.get(key)
        shapes.append(
            ShapeReport(
                key=key,
                rows=tuple(rows[M] for M in sorted(rows)),
                m_requested=cov.m_requested if cov else (),
                models=cov.models if cov else (),
                m_stale=tuple(cov.m_stale) if cov else (),
                left_out=tuple((M, label, reason) for M, (label, reason) in left_out),
            )
        )
    return shapes


def _scope(view: DeviceView, allow_stale: bool) -> ReportScope:
    """Which trials the page counts: every one under allow_stale, else the current kernel
    source and Triton major.minor, with how many ok trials of other versions were left out."""
    if allow_stale:
        return ReportScope(allow_stale=True)
    current = view.scope.current
    return ReportScope(
        allow_stale=False,
        kernel_hash=current.kernel_hash,
        triton_minor=current.triton_minor,
        stale_trials=view.scope.stale_trials,
    )


@router.get(
    "/{device_name}/report",
    response_class=HTMLResponse,
    response_model=None,
    responses={404: {"description": "Unknown device"}},
    description=(
        "An HTML page with, per shape, winner and default latency over M (log scales), speedup "
        "over the default, achieved bandwidth and throughput, the re-timing's spread and why a "
        "decided winner was kept, coverage gaps, the imported files (label, M keys, entries left "
        "out by the launch check), and the environments; inline SVG charts rendered on the "
        "server, no script. A device with imported files only shows their entries, marked not "
        "measured.\n\n"
        "Winners come from trials of the current kernel source and Triton major.minor only (as "
        "the file routes serve them), unless allow_stale; the page says which, and how many ok "
        "trials of other versions it left out. 404 for an unknown device."
    ),
)
def read_report(
    device_name: KnownDevice,
    session: SessionDep,
    out_dtype: OutDtype = None,
    allow_stale: AllowStale = False,
) -> HTMLResponse:
    """Render the device's HTML report."""
    view = read_device(session, device_name, out_dtype=out_dtype, allow_stale=allow_stale)
    shapes = _shapes(session, view)
    ceilings = repo.device_ceilings(session, device_name=device_name)
    backends = backends_section(
        device_name,
        view.compute_capability,
        repo.list_comparisons(session, device_name=device_name, limit=1),
    )
    imports = repo.list_imports(session, device_name=device_name)
    swept = device_name in repo.list_device_names(session)
    html = render_report(
        device_name,
        shapes,
        [asdict(e) for e in view.environments],
        version=tuner.__version__,
        out_dtype=out_dtype,
        ceilings=ceilings,
        scope=_scope(view, allow_stale),
        backends=backends,
        imports=imports,
        imported_only=None
        if swept or not imports
        else imported_only_note(device_name, imports, report=True),
    )
    return HTMLResponse(html)
