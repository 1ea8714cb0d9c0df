"""`tuner compare` runs of a device: which kernel vLLM could run is fastest, per (N, K, M)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

from fastapi import APIRouter, Query

from api import schemas
from api.deps import SessionDep
from api.routes.devices import KnownDevice
from db import repo

router = APIRouter(prefix="/devices", tags=["devices"])


@router.get(
    "/{device_name}/comparisons",
    response_model=list[schemas.ComparisonOut],
    responses={404: {"description": "Unknown device"}},
    description=(
        "The device's `tuner compare` runs, newest first: per (N, K, M) each kernel's median "
        "latency (ok), or why it failed or was not timed, and the decode and prefill verdicts. "
        "404 for an unknown device."
    ),
)
def list_comparisons(
    device_name: KnownDevice,
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=100, description="At most this many runs.")] = 10,
) -> list[schemas.ComparisonOut]:
    """List the device's `tuner compare` runs, newest first."""
    runs = repo.list_comparisons(session, device_name=device_name, limit=limit)
    return [
        schemas.ComparisonOut(
            **{
                **asdict(run),
                "verdicts": list(run.verdicts),
                "points": [asdict(p) for p in run.points],
            }
        )
        for run in runs
    ]
