"""`tuner compare` results: the kernels vLLM could run for a model's shapes, timed on one device.

Re-exported by `db.repo`; keyword-only, take a Session, never commit, return frozen dataclasses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from db.devices import get_or_create_device
from db.models import Comparison, ComparisonPoint, Device, Environment

POINT_STATUSES = ("ok", "failed", "unavailable")


@dataclass(frozen=True)
class PointRow:
    """One kernel at one (N, K, M): `status` ok, failed or unavailable; times in microseconds
    (None unless ok); `note` the Triton config or the reason."""

    N: int
    K: int
    M: int
    backend: str
    status: str
    latency_us: float | None
    p20_us: float | None
    p80_us: float | None
    note: str


@dataclass(frozen=True)
class ComparisonInfo:
    """One comparison run with its points (sorted by N, K, M, backend) and verdict lines."""

    comparison_id: int
    device_name: str
    gpu_name: str
    model: str
    tp: int
    out_dtype: str
    verdicts: tuple[str, ...]
    created_at: datetime
    points: tuple[PointRow, ...]
    kernel_source: str = "builtin"
    vllm: str = ""


def record_comparison(
    session: Session,
    *,
    device_name: str,
    environment_id: int,
    model: str,
    tp: int,
    out_dtype: str,
    verdicts: Sequence[str],
    points: Sequence[PointRow],
) -> int:
    """Store one comparison run, all of its points in the same transaction.

    Args:
        session: the open session.
        device_name: vLLM's device key.
        environment_id: where it ran (`db.devices.get_or_create_environment`).
        model: the model key; tp: its tensor-parallel size.
        out_dtype: "bfloat16" or "float16".
        verdicts: the decode and prefill lines.
        points: every kernel at every (N, K, M).

    Returns:
        The comparison_id.

    Raises:
        ValueError: a point with an unknown status, or the same (N, K, M, backend) twice.
    """
    seen = set()
    for point in points:
        if point.status not in POINT_STATUSES:
            raise ValueError(f"status {point.status!r} is not one of {POINT_STATUSES}")
        key = (point.N, point.K, point.M, point.backend)
        if key in seen:
            raise ValueError(f"N={point.N},K={point.K},M={point.M} {point.backend} twice")
        seen.add(key)
    row = Comparison(
        device_id=get_or_create_device(session, device_name=device_name),
        environment_id=environment_id,
        model=model,
        tp=tp,
        out_dtype=out_dtype,
        verdicts=list(verdicts),
    )
    session.add(row)
    session.flush()
    session.add_all(
        ComparisonPoint(comparison_id=row.comparison_id, **vars(point)) for point in points
    )
    session.flush()
    return row.comparison_id


def list_comparisons(
    session: Session, *, device_name: str, limit: int = 20
) -> list[ComparisonInfo]:
    """A device's comparisons, newest first, with their points.

    Args:
        session: the open session.
        device_name: vLLM's device key.
        limit: at most this many runs.
    """
    runs = session.execute(
        select(Comparison, Environment.gpu_name, Environment.kernel_source, Environment.vllm)
        .join(Device, Comparison.device_id == Device.device_id)
        .join(Environment, Comparison.environment_id == Environment.environment_id)
        .where(Device.device_name == device_name)
        .order_by(Comparison.comparison_id.desc())
        .limit(limit)
    ).all()
    infos = []
    for run, gpu_name, kernel_source, vllm in runs:
        rows = session.scalars(
            select(ComparisonPoint).where(ComparisonPoint.comparison_id == run.comparison_id)
        ).all()
        points = sorted(
            (
                PointRow(
                    r.N, r.K, r.M, r.backend, r.status, r.latency_us, r.p20_us, r.p80_us, r.note
                )
                for r in rows
            ),
            key=lambda p: (p.N, p.K, p.M, p.backend),
        )
        infos.append(
            ComparisonInfo(
                run.comparison_id,
                device_name,
                gpu_name,
                run.model,
                run.tp,
                run.out_dtype,
                tuple(run.verdicts),
                run.created_at,
                tuple(points),
                kernel_source,
                vllm,
            )
        )
    return infos
