"""Ready-to-paste read-only mounts of a device's files (docker, compose or Kubernetes), or the
recipe that pulls a release before the engine starts."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import PlainTextResponse
from pydantic import AnyHttpUrl, Field

from api.deps import KnownDevice, MergeQuery, SessionDep, SettingsDep
from api.schemas import MAX_INT32
from tuner.files import mounts
from tuner.files.device import MergeError, device_mounts

router = APIRouter(prefix="/devices", tags=["mounts"])


class MountQuery(MergeQuery):
    """The query of GET /devices/{d}/mounts, as `tuner mounts` takes its options."""

    format: mounts.MountFormat = Field("docker", description="Mounts, or (-pull) a pull recipe.")
    host_dir: str = Field(
        mounts.DEFAULT_HOST_DIR, max_length=512, description="Host folder of the files."
    )
    server: AnyHttpUrl | None = Field(
        None, description="-pull: the service's URL as the pods reach it (default: this one's)."
    )
    release: int | None = Field(
        None, ge=1, le=MAX_INT32, description="-pull: the release [default: the latest]."
    )


@router.get(
    "/{device_name}/mounts",
    response_class=PlainTextResponse,
    responses={200: {"content": {"text/plain": {}}}},
)
def read_mounts(
    device_name: KnownDevice,
    query: Annotated[MountQuery, Query()],
    session: SessionDep,
    settings: SettingsDep,
    request: Request,
) -> str:
    """The same text as `tuner mounts --device ...`, to paste.

    One read-only mount per file of the device, commented, with the device's advice on what
    makes vLLM read the files (and `--linear-backend triton` where it is needed).
    `?format=k8s-pull|compose-pull`: the recipe that runs `tuner pull` of a release
    (`?release=N`, default the latest) from `?server=` (default: the URL this request reached)
    before the engine starts. 404 for an unknown device or release, or no files; 409 if the
    winners cannot be merged; 422 for an unknown format, a bad host folder or server URL.
    """
    try:
        return device_mounts(
            session,
            device_name,
            fmt=query.format,
            engine=query.engine,
            host_dir=query.host_dir,
            server=str(query.server or request.base_url).rstrip("/"),
            release=query.release,
            out_dtype=query.out_dtype,
            allow_stale=query.allow_stale,
            allow_partial=query.allows_partial(settings),
        )
    except LookupError as exc:
        raise HTTPException(404, detail=str(exc)) from None
    except MergeError as exc:
        raise HTTPException(409, detail=str(exc)) from None
    except ValueError as exc:
        raise HTTPException(422, detail=str(exc)) from None
