"""The HTML report of a device: latency and speedup over M per shape, gaps, versions."""

from __future__ import annotations

from dataclasses import asdict

from fastapi import APIRouter
from fastapi.responses import HTMLResponse
from sqlalchemy.orm import Session

import tuner
from api.deps import AllowStale, KnownDevice, OutDtypeQuery, SessionDep
from api.report import ReportRow, ShapeReport, backends_section, render_report
from api.routes.devices import imported_only_note
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


def _imported_rows(extra: repo.ImportedShape) -> dict[int, ReportRow]:
    """A shape's imported entries by M: the configs that launch (marked not measured) and those
    the launch check left out."""
    rows = {
        M: ReportRow(M, None, None, None, False, imported_from=label, left_out=reason)
        for M, (label, reason) in extra.left_out.items()
    }
    for M, config in extra.configs.items():
        rows[M] = ReportRow(M, config, None, None, False, imported_from=extra.labels[M])
    return rows


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
        extra = imported.get(key)
        rows = {**(_imported_rows(extra) if extra else {}), **by_shape.get(key, {})}
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


@router.get(
    "/{device_name}/report",
    response_class=HTMLResponse,
    response_model=None,
    responses={404: {"description": "Unknown device"}},
)
def read_report(
    device_name: KnownDevice,
    session: SessionDep,
    out_dtype: OutDtypeQuery = None,
    allow_stale: AllowStale = False,
) -> HTMLResponse:
    """An HTML page on the device's tuning, per shape.

    Winner and default latency over M (log scales), speedup over the default, achieved bandwidth
    and throughput, the re-timing's spread and why a decided winner was kept, coverage gaps, the
    imported files (label, M keys, entries left out by the launch check), and the environments;
    inline SVG charts rendered on the server, no script. A device with imported files only shows
    their entries, marked not measured.

    Winners come from trials of the current kernel source and Triton major.minor only (as the
    file routes serve them), unless allow_stale; the page says which, and how many ok trials of
    other versions it left out. 404 for an unknown device.
    """
    view = read_device(session, device_name, out_dtype=out_dtype, allow_stale=allow_stale)
    comparisons = repo.list_comparisons(session, device_name=device_name, limit=1)
    imports = repo.list_imports(session, device_name=device_name)
    swept = device_name in repo.list_device_names(session)
    html = render_report(
        device_name,
        _shapes(session, view),
        [asdict(e) for e in view.environments],
        version=tuner.__version__,
        out_dtype=out_dtype,
        ceilings=repo.device_ceilings(session, device_name=device_name),
        scope=view.scope,
        backends=backends_section(device_name, view.compute_capability, comparisons),
        imports=imports,
        imported_only=None
        if swept or not imports
        else imported_only_note(device_name, imports, report=True),
    )
    return HTMLResponse(html)
