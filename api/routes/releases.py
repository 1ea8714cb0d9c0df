"""Downloads of published releases: each request reads its row(s) and serves stored bytes; no
merge runs. `GET /devices/{d}/releases` lists them; the merge-on-read views are under
`/devices/{d}/preview/`."""

from __future__ import annotations

import threading
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request, Response
from sqlalchemy.orm import Session

from api import schemas
from api.routes.devices import (
    FILE_RESPONSES,
    DeviceName,
    Engine,
    FileName,
    IfNoneMatch,
    etag_matches,
)
from db import repo
from tuner.inputs.devices import resolve
from tuner.kernels.engines import SGLANG_NOTE
from tuner.kernels.registry import family_of_file, respell_file_name
from tuner.kernels.shape import as_block_shape

router = APIRouter(prefix="/devices", tags=["releases"])

ReleaseNumber = Annotated[
    int | None,
    Query(
        ge=1,
        le=2**31 - 1,
        description="A release number (`GET /devices/{d}/releases`); default: the latest.",
    ),
]


class BlobCache:
    """Released bytes by sha256: content never changes under its hash, so nothing expires;
    the least recently added go when over `limit_bytes`."""

    def __init__(self, limit_bytes: int = 256 << 20) -> None:
        self.limit = limit_bytes
        self._items: dict[str, bytes] = {}
        self._size = 0
        self._lock = threading.Lock()

    def get(self, sha256: str) -> bytes | None:
        """The bytes, or None if not cached."""
        return self._items.get(sha256)

    def put(self, sha256: str, content: bytes) -> None:
        """Keep the bytes (not if larger than the whole cache)."""
        with self._lock:
            if sha256 in self._items or len(content) > self.limit:
                return
            self._items[sha256] = content
            self._size += len(content)
            while self._size > self.limit:
                old = next(iter(self._items))
                self._size -= len(self._items.pop(old))


CACHE = BlobCache()


def _session(request: Request) -> Session:
    return Session(request.app.state.store.open())


def _canonical(session: Session, device_name: str) -> str | None:
    """The stored device a path names (`L20` -> `NVIDIA_L20`), or None."""
    known = sorted(
        set(repo.list_release_device_names(session)) | set(repo.known_device_names(session))
    )
    names = [device_name] if device_name in known else resolve(device_name, known)
    return names[0] if len(names) == 1 else None


def _no_release(session: Session, device_name: str, number: int | None) -> HTTPException:
    """The 404 of a device or release that is not there, naming what is."""
    stored = _canonical(session, device_name)
    if stored is None:
        known = (
            ", ".join(
                sorted(
                    set(repo.list_release_device_names(session))
                    | set(repo.list_device_names(session))
                )
            )
            or "(none)"
        )
        return HTTPException(404, detail=f"unknown device {device_name!r}; known: {known}")
    numbers = [r.number for r in repo.list_releases(session, device_name=stored)]
    if not numbers:
        return HTTPException(
            404,
            detail=f"{stored} has no release yet: `tuner publish "
            f"--device {stored}` makes one; /devices/{stored}/preview/configs "
            "shows what it would contain",
        )
    listed = ", ".join(map(str, sorted(numbers)))
    return HTTPException(404, detail=f"{stored} has no release {number}; releases: {listed}")


def _send(
    session: Session,
    *,
    sha256: str,
    number: int,
    pinned: bool,
    if_none_match: str | None,
    media_type: str,
    filename: str,
) -> Response:
    etag = f'"{sha256}"'
    cache = "public, max-age=31536000, immutable" if pinned else "no-cache"
    headers = {"ETag": etag, "Cache-Control": cache, "X-Tuner-Release": str(number)}
    if etag_matches(if_none_match, etag):
        return Response(status_code=304, headers=headers)
    body = CACHE.get(sha256)
    if body is None:
        body = repo.blob(session, sha256=sha256)
        if body is None:  # a row without its blob: the store is damaged, not the request
            raise HTTPException(
                503,
                detail=f"release {number} lacks the bytes of {filename}",
                headers={"Retry-After": "60"},
            )
        CACHE.put(sha256, body)
    headers["Content-Disposition"] = f'attachment; filename="{filename}"'
    return Response(content=body, media_type=media_type, headers=headers)


@router.get(
    "/{device_name}/configs/{file_name}",
    response_class=Response,
    response_model=None,
    responses={200: {"content": {"application/json": {}}}, **FILE_RESPONSES},
    description=(
        "One file of a release (the latest unless `?release=N`), byte for byte as published, "
        'with `ETag: "<sha256>"` and `X-Tuner-Release: N`; 304 if the client has it. 404 for '
        "an unknown device, release or file (the detail lists what exists); 503 when the store is "
        "busy or unreachable."
    ),
)
def download_file(
    device_name: DeviceName,
    file_name: FileName,
    request: Request,
    release: ReleaseNumber = None,
    engine: Engine = "vllm",
    if_none_match: IfNoneMatch = None,
) -> Response:
    """Download one file of a release as published."""
    with _session(request) as session:
        found = repo.find_released_file(
            session, device_name=device_name, file_name=file_name, number=release
        )
        if found is None:  # another spelling or a device alias: the slow path
            found, device_name = _find_slow(session, device_name, file_name, release)
        return _send(
            session,
            sha256=found.sha256,
            number=found.number,
            pinned=release is not None,
            if_none_match=if_none_match,
            media_type="application/json",
            filename=respell_file_name(file_name, engine, device_name),
        )


def _find_slow(
    session: Session, device_name: str, file_name: str, number: int | None
) -> tuple[repo.ReleasedFile, str]:
    stored = _canonical(session, device_name) or device_name
    try:
        family = family_of_file(file_name)
        shape, named_device, _ = family.files.parse_file_name(file_name)
    except ValueError as exc:
        info = repo.get_release(session, device_name=stored, number=number)
        names = ", ".join(f.file_name for f in info.files) if info else "(no release)"
        raise HTTPException(404, detail=f"{exc}; files: {names or '(none)'}") from None
    if named_device != family.files.file_device(stored):
        raise HTTPException(
            404, detail=f"{file_name!r} names device {named_device!r}, not {stored!r}"
        )
    wanted = family.respell(file_name, "vllm", stored)
    found = repo.find_released_file(session, device_name=stored, file_name=wanted, number=number)
    if found is not None:
        return found, stored
    info = repo.get_release(session, device_name=stored, number=number)
    if info is None:
        raise _no_release(session, stored, number)
    where = f"no file {wanted!r} in {stored} release {info.number}"
    for skipped in info.summary.get("skipped", []):
        if (skipped["N"], skipped["K"], as_block_shape(skipped["block_shape"])) == (
            shape.N,
            shape.K,
            shape.block_shape,
        ):
            raise HTTPException(
                404,
                detail=f"{where}: {skipped['reason']}; "
                f"/devices/{stored}/preview/configs/{wanted}?partial=true "
                "merges what there is",
            )
    names = ", ".join(f.file_name for f in info.files) or "(none)"
    raise HTTPException(404, detail=f"{where}; files: {names}")


@router.get(
    "/{device_name}/configs.zip",
    response_class=Response,
    response_model=None,
    responses={200: {"content": {"application/zip": {}}}, **FILE_RESPONSES},
    description=(
        "All files of a release (the latest unless `?release=N`) and a README.txt as one zip, as "
        'published, with `ETag: "<sha256>"`; 304 if the client has it. 404 for an unknown '
        "device or release; 503 when the store is busy."
    ),
)
def download_zip(
    device_name: DeviceName,
    request: Request,
    release: ReleaseNumber = None,
    engine: Engine = "vllm",
    if_none_match: IfNoneMatch = None,
) -> Response:
    """Download all files of a release as one zip, as published."""
    with _session(request) as session:
        found = repo.find_release_archive(
            session, device_name=device_name, engine=engine, number=release
        )
        if found is None:
            stored = _canonical(session, device_name)
            found = (
                None
                if stored is None
                else repo.find_release_archive(
                    session, device_name=stored, engine=engine, number=release
                )
            )
            if found is None or stored is None:
                raise _no_release(session, device_name, release)
            device_name = stored
        suffix = "" if engine == "vllm" else f"-{engine}"
        return _send(
            session,
            sha256=found.sha256,
            number=found.number,
            pinned=release is not None,
            if_none_match=if_none_match,
            media_type="application/zip",
            filename=f"{device_name}-configs{suffix}.zip",
        )


def _release(info: repo.ReleaseInfo) -> schemas.Release:
    return schemas.Release(
        device_name=info.device_name,
        number=info.number,
        content_sha256=info.content_sha256,
        created_at=info.created_at,
        created_by=info.created_by,
        reason=info.reason,
        files=[
            schemas.ReleaseFile(
                file_name=f.file_name,
                sha256=f.sha256,
                size=f.size,
                m_keys=f.detail.get("m_keys", []),
                m_imported=f.detail.get("m_imported", []),
            )
            for f in info.files
        ],
        summary=info.summary,
    )


@router.get(
    "/{device_name}/releases",
    response_model=list[schemas.Release],
    responses={404: {"description": "Unknown device"}},
    description=(
        "A device's releases, newest first, with their files and summaries. 404 for an unknown "
        "device."
    ),
)
def list_device_releases(device_name: DeviceName, request: Request) -> list[schemas.Release]:
    """List a device's releases, newest first."""
    with _session(request) as session:
        stored = _canonical(session, device_name)
        if stored is None:
            raise _no_release(session, device_name, None)
        return [_release(info) for info in repo.list_releases(session, device_name=stored)]


@router.get(
    "/{device_name}/configs",
    response_model=schemas.DeviceConfigs,
    responses={404: {"description": "Unknown device or release"}},
    description=(
        "The files of a release (the latest unless `?release=N`): hashes, M keys, merge notes, "
        "and the shapes it left out. 404 for an unknown device or release."
    ),
)
def list_configs(
    device_name: DeviceName,
    request: Request,
    release: ReleaseNumber = None,
    engine: Engine = "vllm",
) -> schemas.DeviceConfigs:
    """List the files of a release."""
    with _session(request) as session:
        stored = _canonical(session, device_name)
        info = (
            None
            if stored is None
            else repo.get_release(session, device_name=stored, number=release)
        )
        if info is None:
            raise _no_release(session, device_name, release)
    files = [
        schemas.ConfigFile(
            file_name=respell_file_name(f.file_name, engine, info.device_name),
            N=f.N,
            K=f.K,
            block_shape=f.block_shape,
            sha256=f.sha256,
            m_keys=f.detail.get("m_keys", []),
            partial=f.detail.get("partial", False),
            m_missing=f.detail.get("m_missing", []),
            notes=f.detail.get("notes", []),
            warnings=f.detail.get("warnings", []),
            m_imported=f.detail.get("m_imported", []),
        )
        for f in info.files
    ]
    skipped = [
        schemas.SkippedShape(
            N=s["N"],
            K=s["K"],
            block_shape=as_block_shape(s["block_shape"]),
            reason=s["reason"],
            m_missing=s["m_missing"],
        )
        for s in info.summary.get("skipped", [])
    ]
    return schemas.DeviceConfigs(
        device_name=info.device_name,
        files=files,
        skipped=skipped,
        engine=engine,
        release=info.number,
        engine_note=SGLANG_NOTE if engine == "sglang" else None,
    )
