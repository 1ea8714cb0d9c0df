"""Ready-to-paste read-only mounts of a device's files (docker, compose or Kubernetes), or the
recipe that pulls a release before the engine starts."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import PlainTextResponse
from pydantic import AnyHttpUrl, Field

from api.deps import KnownDevice, MergeQuery, SessionDep, SettingsDep
from api.routes.releases import release_of
from api.schemas import MAX_INT32, EngineName
from tuner.files import mounts
from tuner.files.pull import release_entry, render_pull_recipe

router = APIRouter(prefix="/devices", tags=["mounts"])


class MountQuery(MergeQuery):
    """The query of GET /devices/{d}/mounts, as `tuner mounts` takes its options."""

    format: mounts.MountFormat = Field("docker", description="Mounts, or (-pull) a pull recipe.")
    engine: EngineName = Field("vllm", description="The engine whose folders the files go to.")
    site_packages: str | None = Field(
        None, max_length=512, description="The engine's site-packages in the container."
    )
    host_dir: str = Field(
        mounts.DEFAULT_HOST_DIR, max_length=512, description="Host folder of the files."
    )
    engine_version: str | None = Field(
        None, max_length=64, description="The engine's release in the image (its folders)."
    )
    triton_version: str | None = Field(
        None, max_length=64, description="SGLang: the image's Triton (its fused-MoE folder)."
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
    before the engine starts. 404 for an unknown device or release, or no files (saying how many
    stale trials were left out); 409 if the winners cannot be merged; 422 for an unknown format,
    a bad site-packages path, server URL, engine or Triton version, or a bad allow_stale.
    """
    site_packages = query.site_packages or mounts.DEFAULT_SITE_PACKAGES[query.engine]
    try:
        if query.format.endswith("-pull"):
            return render_pull_recipe(
                query.format,
                server=str(query.server or request.base_url).rstrip("/"),
                release=release_entry(release_of(session, device_name, query.release)),
                engine=query.engine,
                site_packages=site_packages,
                engine_version_=query.engine_version,
                triton_version=query.triton_version,
            )
        read = query.files(session, device_name, settings)
        if not read.files.files:
            stale = read.view.scope.stale_trials
            hint = f"; {stale} ok trial(s) of another kernel or Triton left out (?allow_stale=true"
            detail = f"{device_name} has no complete file to mount yet; ?partial=true mounts what"
            raise HTTPException(404, f"{detail} there is" + (f"{hint} uses them)" if stale else ""))
        return mounts.render_mounts(
            mounts.store_request(
                read,
                query.triton_version,
                engine=query.engine,
                host_dir=query.host_dir,
                site_packages=site_packages,
                fmt=query.format,
                engine_version=query.engine_version,
            )
        )
    except ValueError as exc:
        raise HTTPException(422, detail=str(exc)) from None
