"""Every stored trial of a device, with its problem, sweep and environment: what
bench/record_landscape.py turns into a landscape file and bench/pipeline_quality.py reads back.
Bench code: it reads the store's tables directly."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from db.models import (
    ENVIRONMENT_KEY,
    Environment,
    Sweep,
    Task,
    Trial,
    block_shape_of,
    config_of,
    take,
)
from db.views import on_device
from tuner.core import TrialStatus


@dataclass(frozen=True)
class DeviceTrialRow:
    """One stored trial of a device with its problem, sweep and environment (ENVIRONMENT_KEY;
    rows of one environment share one dict). `block_shape` None: per-tensor."""

    trial_id: int
    N: int
    K: int
    M: int
    block_shape: tuple[int, int] | None
    out_dtype: str
    space: str
    config: dict[str, int]
    status: TrialStatus
    latency_us: float | None
    p20_us: float | None
    p80_us: float | None
    environment_id: int
    environment: dict[str, str]


def device_trials(
    session: Session, *, device_name: str, out_dtype: str | None = None
) -> list[DeviceTrialRow]:
    """Every trial of a device over its sweeps (of `out_dtype` unless None) by trial_id, e.g.
    to record a landscape file."""
    columns = [*Trial.__table__.c, Task.N, Task.K, Task.M, Sweep.space, Sweep.out_dtype]
    columns += [Sweep.block_n, Sweep.block_k, *(getattr(Environment, k) for k in ENVIRONMENT_KEY)]
    query = on_device(select(*columns).join_from(Trial, Task), device_name, out_dtype)
    query = query.join(Environment, Trial.environment_id == Environment.environment_id)
    environments: dict[int, dict[str, str]] = {}  # one dict per environment
    return [
        take(
            DeviceTrialRow,
            row,
            block_shape=block_shape_of(row["block_n"], row["block_k"]),
            config=config_of(row),
            status=TrialStatus(row["status"]),
            environment=environments.setdefault(
                row["environment_id"], {k: row[k] for k in ENVIRONMENT_KEY}
            ),
        )
        for row in session.execute(query.order_by(Trial.trial_id)).mappings()
    ]
