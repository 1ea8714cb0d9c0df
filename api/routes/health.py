"""Liveness: version and store URL; does not touch the store."""

from __future__ import annotations

from fastapi import APIRouter

import tuner
from api.deps import SettingsDep
from api.schemas import Health

router = APIRouter(prefix="/health", tags=["health"])


@router.get("", response_model=Health)
def read_health(settings: SettingsDep) -> Health:
    """The service is up.

    Args:
        settings: The app's settings.

    Returns:
        Status, tuner version and the store URL with any password masked.
    """
    return Health(status="ok", version=tuner.__version__, store=settings.masked_db_url())
