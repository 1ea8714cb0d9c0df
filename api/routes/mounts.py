"""Ready-to-paste read-only mounts of a device's files (docker, compose or Kubernetes)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import PlainTextResponse

from api.deps import SessionDep, SettingsDep
from api.routes.devices import (
    AllowStale,
    Engine,
    KnownDevice,
    OutDtype,
    Partial,
    store_files,
)
from db import repo
from tuner.files.archive import versions_line, winner_versions
from tuner.files.mounts import (
    DEFAULT_HOST_DIR,
    DEFAULT_SITE_PACKAGES,
    FORMATS,
    MountRequest,
    check_site_packages,
    render_mounts,
)
from tuner.files.pull import PULL_FORMATS, release_entry, render_pull_recipe

router = APIRouter(prefix="/devices", tags=["mounts"])


@router.get(
    "/{device_name}/mounts",
    response_class=PlainTextResponse,
    response_model=None,
    responses={
        200: {"content": {"text/plain": {}}},
        404: {"description": "Unknown device or release, or no files to mount"},
        422: {"description": "Bad format, site-packages path or server URL"},
    },
    description=(
        "The same text as `tuner mounts --device ...`: one read-only mount per file of the "
        "device, commented, to paste, with the device's advice on what makes vLLM read the files "
        "(and `--linear-backend triton` where it is needed). `?format=k8s-pull|compose-pull`: the "
        "recipe that runs `tuner pull` of a release (`?release=N`, default the latest) from "
        "`?server=` (default: the URL this request reached) before the engine starts. 404 for an "
        "unknown device or release, or no files (saying how many stale trials were left out); "
        "409 if the winners cannot be merged; 422, with a one-line detail, for an unknown format, "
        "a bad site-packages path, server URL, engine or Triton version, or a bad allow_stale."
    ),
)
def read_mounts(
    device_name: KnownDevice,
    session: SessionDep,
    settings: SettingsDep,
    request: Request,
    engine: Engine = "vllm",
    site_packages: Annotated[
        str | None,
        Query(
            max_length=512,
            description="The engine's site-packages folder in the container "
            "(default: the usual image's, as `tuner mounts` prints it).",
        ),
    ] = None,
    format: Annotated[
        str,
        Query(
            max_length=32,
            description="docker (run flags), compose (a volumes list), k8s (a "
            "ConfigMap with volume mounts), or k8s-pull / compose-pull (`tuner pull` of a release "
            "into a volume before the engine starts).",
        ),
    ] = "docker",
    host_dir: Annotated[
        str, Query(max_length=512, description="Host folder holding the exported files.")
    ] = DEFAULT_HOST_DIR,
    partial: Partial = None,
    out_dtype: OutDtype = None,
    allow_stale: AllowStale = False,
    engine_version: Annotated[
        str | None,
        Query(
            max_length=64,
            description="The engine's release in the image, which decides its "
            "config folders (default: vLLM 0.33.0, SGLang 0.5.23).",
        ),
    ] = None,
    triton_version: Annotated[
        str | None,
        Query(
            max_length=64,
            description="SGLang: the image's Triton, e.g. 3.8.0; fused-MoE files go "
            "to configs/triton_3_8_0/ (default: the Triton the files were tuned with).",
        ),
    ] = None,
    server: Annotated[
        str | None,
        Query(
            max_length=512,
            description="k8s-pull / compose-pull: the tuner service's URL as the "
            "pods reach it, e.g. http://tuner:8000 (default: the URL this request reached).",
        ),
    ] = None,
    release: Annotated[
        int | None,
        Query(
            ge=1,
            le=2**31 - 1,
            description="k8s-pull / compose-pull: the release to pin (default: the latest).",
        ),
    ] = None,
) -> PlainTextResponse:
    """Render read-only mounts of the device's files, as `tuner mounts` does."""
    if format in PULL_FORMATS:
        return _pull_recipe(
            session,
            device_name,
            format,
            server or str(request.base_url),
            release,
            engine=engine,
            site_packages=site_packages or DEFAULT_SITE_PACKAGES[engine],
            engine_version=engine_version,
            triton_version=triton_version,
        )
    if format not in FORMATS:
        raise HTTPException(
            422, detail=f"format {format[:32]!r} is not one of {', '.join(FORMATS + PULL_FORMATS)}"
        )
    allow = settings.allow_partial if partial is None else partial
    return _file_mounts(
        session,
        device_name,
        engine=engine,
        site_packages=site_packages,
        fmt=format,
        host_dir=host_dir,
        partial=allow,
        out_dtype=out_dtype,
        allow_stale=allow_stale,
        engine_version=engine_version,
        triton_version=triton_version,
    )


def _file_mounts(
    session: SessionDep,
    device_name: str,
    *,
    engine: str,
    site_packages: str | None,
    fmt: str,
    host_dir: str,
    partial: bool,
    out_dtype: str | None,
    allow_stale: bool,
    engine_version: str | None,
    triton_version: str | None,
) -> PlainTextResponse:
    """Mounts of the device's merged files from the store: `tuner.files.mounts.render_mounts`.

    Raises:
        HTTPException: 404 when the device has no file to mount; 409 when its winners cannot
            be merged; 422 (one line) for a bad site-packages path, engine or Triton version.
    """
    read = store_files(
        session,
        device_name,
        partial=partial,
        out_dtype=out_dtype,
        engine=engine,
        allow_stale=allow_stale,
    )
    merged = read.files
    if not merged.files:
        stale = read.view.scope.stale_trials
        hint = (
            f"; {stale} ok trial(s) of another kernel or Triton left out "
            "(?allow_stale=true uses them)"
            if stale
            else ""
        )
        raise HTTPException(
            404,
            detail=f"{device_name} has no complete file to mount yet; "
            f"?partial=true mounts what there is{hint}",
        )
    versions = winner_versions(read.view.environments, read.view.winners)
    tuned_triton = versions["triton"][0] if len(versions["triton"]) == 1 else None
    try:
        text = render_mounts(
            MountRequest(
                device_name=device_name,
                engine=engine,
                file_names=tuple(f.file_name for f in merged.files),
                host_dir=host_dir,
                site_packages=site_packages or DEFAULT_SITE_PACKAGES[engine],
                fmt=fmt,
                compute_capability=read.view.compute_capability,
                tuned_with=versions_line(versions),
                engine_version=engine_version,
                triton_version=triton_version or tuned_triton,
                triton_from="as asked" if triton_version else "the one the files were tuned with",
                contents={f.file_name: f.merged.text for f in merged.files},
                left_out=tuple(f"# {line}" for line in merged.left_out),
            )
        )
    except ValueError as exc:
        raise HTTPException(422, detail=str(exc)) from None
    return PlainTextResponse(text)


def _pull_recipe(
    session: SessionDep,
    device_name: str,
    fmt: str,
    server: str,
    number: int | None,
    *,
    engine: str,
    site_packages: str,
    engine_version: str | None,
    triton_version: str | None,
) -> PlainTextResponse:
    """`tuner mounts --format k8s-pull|compose-pull` from the store's own release (no request
    to any server): `tuner.files.pull.render_pull_recipe`.

    Raises:
        HTTPException: 404 for no such release; 422 (one line) for a bad server URL,
            site-packages path or engine version.
    """
    if not server.startswith(("http://", "https://")) or any(ch.isspace() for ch in server):
        raise HTTPException(
            422, detail=f"server must be an http:// or https:// URL, got {server[:80]!r}"
        )
    info = repo.get_release(session, device_name=device_name, number=number)
    if info is None:
        have = sorted(r.number for r in repo.list_releases(session, device_name=device_name))
        if have:
            raise HTTPException(
                404,
                detail=f"{device_name} has no release {number}; releases: "
                f"{', '.join(map(str, have))}",
            )
        raise HTTPException(
            404,
            detail=f"{device_name} has no published release (`tuner "
            f"publish --device {device_name}` makes one)",
        )
    try:
        text = render_pull_recipe(
            fmt,
            server=server.rstrip("/"),
            release=release_entry(info),
            engine=engine,
            site_packages=check_site_packages(site_packages),
            engine_version_=engine_version,
            triton_version=triton_version,
            triton_from="as asked",
        )
    except ValueError as exc:
        raise HTTPException(422, detail=str(exc)) from None
    return PlainTextResponse(text)
