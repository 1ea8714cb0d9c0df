"""The HTML report of a device: latency and speedup over M per shape, gaps, versions."""

from __future__ import annotations

from dataclasses import asdict

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

import tuner
from api.deps import SessionDep
from api.report import ReportRow, ShapeReport, render_report
from api.routes.devices import KnownDevice, OutDtype
from db import repo

router = APIRouter(prefix="/devices", tags=["report"])


@router.get("/{device_name}/report", response_class=HTMLResponse, response_model=None,
            responses={404: {"description": "Unknown device"}})
def read_report(device_name: KnownDevice, session: SessionDep,
                out_dtype: OutDtype = None) -> HTMLResponse:
    """An HTML page with, per shape, winner and default latency over M (log scales), speedup
    over the default, achieved bandwidth and throughput, coverage gaps, and the environments.

    Args:
        device_name: vLLM's device key.
        session: The store session.
        out_dtype: Only trials of this output dtype.

    Returns:
        The page (inline SVG charts rendered on the server, no script).

    Raises:
        HTTPException: 404 for an unknown device.
    """
    winners = repo.winners(session, device_name=device_name, out_dtype=out_dtype)
    coverage = {(c.N, c.K, c.block_shape): c
                for c in repo.shape_coverage(session, device_name=device_name, out_dtype=out_dtype)}
    imported = repo.imported_configs(session, device_name=device_name)
    by_shape: dict[tuple[int, int, tuple[int, int]], dict[int, ReportRow]] = {}
    for w in winners:
        by_shape.setdefault((w.N, w.K, w.block_shape), {})[w.M] = ReportRow(
            M=w.M, config=w.config, latency_us=w.latency_us,
            default_latency_us=w.default_latency_us, is_default=w.is_default,
        )
    shapes = []
    for key in sorted(set(by_shape) | set(coverage)):
        rows = by_shape.get(key, {})
        extra = imported.get(key)
        for M, config in (extra.configs.items() if extra else ()):
            if M not in rows:
                rows[M] = ReportRow(M=M, config=config, latency_us=None, default_latency_us=None,
                                    is_default=False, imported_from=extra.labels[M])
        cov = coverage.get(key)
        shapes.append(ShapeReport(
            N=key[0], K=key[1], block_shape=key[2], rows=tuple(rows[M] for M in sorted(rows)),
            m_requested=cov.m_requested if cov else (), models=cov.models if cov else (),
        ))
    environments = [asdict(e) for e in repo.device_environments(session, device_name=device_name)]
    ceilings = repo.device_ceilings(session, device_name=device_name)
    html = render_report(device_name, shapes, environments, version=tuner.__version__,
                         out_dtype=out_dtype, ceilings=ceilings)
    return HTMLResponse(html)
