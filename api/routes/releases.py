"""Published releases: each request reads its release and serves the stored bytes; no merge runs
(the merge-on-read views are under `/devices/{d}/preview/`)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, HTTPException, Response
from sqlalchemy.orm import Session

from api import deps, schemas
from api.routes.devices import download, file_responses, vllm_name
from db import repo
from tuner.files.device import stored_release
from tuner.kernels.engines import SGLANG_NOTE
from tuner.kernels.registry import respell_file_name

router = APIRouter(prefix="/devices", tags=["releases"])


def release_of(session: Session, device_name: str, number: int | None) -> repo.ReleaseInfo:
    """The release (the latest when `number` is None); 404 when there is none."""
    try:
        return stored_release(session, device_name, number)
    except LookupError as exc:
        raise HTTPException(404, detail=str(exc)) from None


def _send(
    session: Session, sha256: str, number: int, filename: str, pinned: bool, etag: str | None
) -> Response:
    """The stored bytes of a release's file or archive; 503 when the store lacks them."""
    body = repo.blob(session, sha256=sha256)
    if body is None:  # a row without its blob: the store is damaged, not the request
        detail = f"release {number} lacks the bytes of {filename}"
        raise HTTPException(503, detail=detail, headers={"Retry-After": "60"})
    cache = "public, max-age=31536000, immutable" if pinned else "no-cache"
    headers = {"Cache-Control": cache, "X-Tuner-Release": str(number)}
    return download(body, sha256=sha256, filename=filename, if_none_match=etag, headers=headers)


@router.get(
    "/{device_name}/configs/{file_name}",
    response_class=Response,
    responses=file_responses("application/json"),
)
def download_file(
    device_name: deps.KnownDevice,
    file_name: deps.FileName,
    session: deps.SessionDep,
    release: deps.ReleaseNumber = None,
    engine: deps.EngineParam = "vllm",
    if_none_match: deps.IfNoneMatch = None,
) -> Response:
    """One file of a release (the latest unless `?release=N`), byte for byte as published.

    Any spelling of the file's name (vLLM's or SGLang's, another spelling of the device). With
    `ETag: "<sha256>"` and `X-Tuner-Release: N`; 304 if the client has it. 404 for an unknown
    device, release or file (the detail lists what exists); 503 when the store is busy or
    unreachable.
    """
    info = release_of(session, device_name, release)
    names = ", ".join(f.file_name for f in info.files) or "(none)"
    wanted = vllm_name(file_name, device_name, names)[2]
    filename = respell_file_name(file_name, engine, device_name)
    for f in info.files:
        if f.file_name == wanted:
            return _send(
                session, f.sha256, info.number, filename, release is not None, if_none_match
            )
    raise HTTPException(
        404, f"no file {wanted!r} in {device_name} release {info.number}; files: {names}"
    )


@router.get(
    "/{device_name}/configs.zip",
    response_class=Response,
    responses=file_responses("application/zip"),
)
def download_zip(
    device_name: deps.KnownDevice,
    session: deps.SessionDep,
    release: deps.ReleaseNumber = None,
    engine: deps.EngineParam = "vllm",
    if_none_match: deps.IfNoneMatch = None,
) -> Response:
    """All files of a release (the latest unless `?release=N`) and a README.txt as one zip.

    As published, with `ETag: "<sha256>"`; 304 if the client has it. 404 for an unknown device
    or release; 503 when the store is busy.
    """
    info = release_of(session, device_name, release)  # every release stores both archives
    suffix = "" if engine == "vllm" else f"-{engine}"
    filename = f"{device_name}-configs{suffix}.zip"
    sha256 = info.archives[engine]
    return _send(session, sha256, info.number, filename, release is not None, if_none_match)


@router.get("/{device_name}/releases", response_model=list[schemas.Release])
def list_device_releases(device_name: deps.KnownDevice, session: deps.SessionDep) -> list[Any]:
    """A device's releases, newest first, with their files and summaries.

    404 for an unknown device.
    """
    return [
        schemas.Release(
            **{**asdict(info), "files": [{**asdict(f), **f.detail} for f in info.files]}
        )
        for info in repo.list_releases(session, device_name=device_name)
    ]


@router.get("/{device_name}/configs", response_model=schemas.DeviceConfigs)
def list_configs(
    device_name: deps.KnownDevice,
    session: deps.SessionDep,
    release: deps.ReleaseNumber = None,
    engine: deps.EngineParam = "vllm",
) -> schemas.DeviceConfigs:
    """The files of a release (the latest unless `?release=N`).

    Their hashes, M keys, merge notes, and the shapes the release left out. 404 for an unknown
    device or release.
    """
    info = release_of(session, device_name, release)
    files = [
        schemas.ConfigFile(
            **{
                **asdict(f),
                **f.detail,
                "file_name": respell_file_name(f.file_name, engine, device_name),
            }
        )
        for f in info.files
    ]
    return schemas.DeviceConfigs(
        device_name=device_name,
        files=files,
        skipped=info.summary.get("skipped", []),
        engine=engine,
        release=info.number,
        engine_note=SGLANG_NOTE if engine == "sglang" else None,
    )
