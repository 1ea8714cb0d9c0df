"""The HTML report of a device: latency and speedup over M per shape, gaps, versions."""

from __future__ import annotations

from dataclasses import asdict

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

import tuner
from api.deps import AllowStale, KnownDevice, OutDtypeQuery, SessionDep
from api.report import render_report, report_shapes
from api.routes.devices import imported_only_note
from db import repo
from tuner.files.device import read_device

router = APIRouter(prefix="/devices", tags=["report"])


@router.get(
    "/{device_name}/report",
    response_class=HTMLResponse,
    responses={404: {"description": "Unknown device"}},
)
def read_report(
    device_name: KnownDevice,
    session: SessionDep,
    out_dtype: OutDtypeQuery = None,
    allow_stale: AllowStale = False,
) -> str:
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
    return render_report(
        device_name,
        report_shapes(session, view),
        [asdict(e) for e in view.environments],
        version=tuner.__version__,
        out_dtype=out_dtype,
        scope=view.scope,
        compute_capability=view.compute_capability,
        comparison=comparisons[0] if comparisons else None,
        imports=imports,
        imported_only=None if swept else imported_only_note(device_name, imports, report=True),
    )
