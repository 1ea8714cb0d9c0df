"""Liveness: version and store URL; does not touch the store."""

from __future__ import annotations

from fastapi import APIRouter

import tuner
from api.deps import SettingsDep
from api.schemas import Health

router = APIRouter(prefix="/health", tags=["health"])


@router.get(
    "",
    response_model=Health,
    description=(
        "The service is up: status, tuner version and the store URL with any password masked; "
        "the store is not touched."
    ),
)
def read_health(settings: SettingsDep) -> Health:
    """Say that the service is up, with its version and store URL."""
    return Health(status="ok", version=tuner.__version__, store=settings.masked_db_url())
