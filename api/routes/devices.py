"""Devices in the store, their coverage, and their merged vLLM config files."""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Header, HTTPException, Path, Query, Response
from sqlalchemy.orm import Session

from api import schemas
from api.deps import SessionDep, SettingsDep
from db import repo
from tuner import core
from tuner.core import DEVICE_ARG_PATTERN, triton_minor
from tuner.files.archive import build_zip
from tuner.files.device import (
    HTTP_STALE_HINT,
    DeviceView,
    MergeError,
    StoreFiles,
    device_files,
    read_device,
)
from tuner.files.imports import imported_files_summary
from tuner.files.provenance import Provenance
from tuner.inputs.devices import resolve
from tuner.kernels.engines import SGLANG_NOTE
from tuner.kernels.registry import family_of_file, get_family
from tuner.kernels.shape import FamilyShape

router = APIRouter(prefix="/devices", tags=["devices"])

DeviceName = Annotated[
    str,
    Path(
        pattern=DEVICE_ARG_PATTERN,
        description="vLLM's device key, e.g. `NVIDIA_L20`; `L20` and `NVIDIA L20` name it too.",
    ),
]
OutDtype = Annotated[
    core.OutDtype | None,
    Query(
        description="Only trials timed with this output dtype; needed when a device has both.",
    ),
]
Partial = Annotated[
    bool | None,
    Query(
        description="Also serve shapes whose M grid has M without a winner "
        "(default: the service's TUNER_ALLOW_PARTIAL).",
    ),
]
AllowStale = Annotated[
    bool,
    Query(
        description="Also use trials timed with another kernel source or another Triton "
        "major.minor than the current ones (see `current` in GET /devices).",
    ),
]
Engine = Annotated[
    Literal["vllm", "sglang"],
    Query(
        description="File-name spelling: vLLM's `block_shape=[128,128]` or SGLang's "
        "`block_shape=[128, 128]`. The configs are tuned on vLLM's kernel either way.",
    ),
]
FileName = Annotated[
    str,
    Path(
        description="A config file name in vLLM's or SGLang's spelling (see the `configs` list).",
    ),
]
IfNoneMatch = Annotated[
    str | None,
    Header(
        description="The client's cached ETag(s); a match answers 304 with no body.",
    ),
]
FILE_RESPONSES: dict[int | str, dict[str, object]] = {
    304: {"description": "If-None-Match matched the ETag"},
    404: {"description": "Unknown device or file"},
}


def known_device(device_name: DeviceName, session: SessionDep) -> str:
    """The store's name for the device a path names, matched as `tuner --device` matches.

    Raises:
        HTTPException: 404 naming the known devices when none (or several) match.
    """
    known = repo.known_device_names(session)
    names = [device_name] if device_name in known else resolve(device_name, known)
    if len(names) != 1:
        listed = ", ".join(known) or "(none)"
        raise HTTPException(404, detail=f"unknown device {device_name!r}; known: {listed}")
    return names[0]


KnownDevice = Annotated[str, Depends(known_device)]


def store_files(
    session: Session,
    device_name: str,
    *,
    partial: bool,
    out_dtype: str | None,
    engine: str = "vllm",
    allow_stale: bool = False,
) -> StoreFiles:
    """A device's merged files (`tuner.files.device.device_files`): winners of the store,
    imported entries where no winner.

    Winners come from trials of the current kernel source and Triton major.minor only, unless
    allow_stale.

    Raises:
        HTTPException: 409 if the winners cannot be merged (e.g. two output dtypes).
    """
    try:
        return device_files(
            session,
            device_name,
            out_dtype=out_dtype,
            allow_stale=allow_stale,
            allow_partial=partial,
            engine=engine,
        )
    except MergeError as exc:  # e.g. winners of both output dtypes for one (shape, M)
        hint = "; pick one with ?out_dtype=bfloat16 or float16" if out_dtype is None else ""
        raise HTTPException(409, detail=f"{exc}{hint}") from None


def _shapes(view: DeviceView) -> list[schemas.ShapeCoverage]:
    covered: dict[FamilyShape, set[int]] = {}
    for row in view.winners:
        covered.setdefault(FamilyShape.of_row(row), set()).add(row.M)
    requested = {key: sorted(grid) for key, grid in view.grids.items()}
    stale = view.stale
    shapes = []
    for key in sorted(set(covered) | set(requested)):
        m_covered = covered.get(key, set())
        m_requested = requested.get(key, [])
        file_name = get_family(key.family).files.file_name(key.shape, view.device_name, "vllm")
        shapes.append(
            schemas.ShapeCoverage(
                N=key.shape.N,
                K=key.shape.K,
                block_shape=key.shape.block_shape,
                m_requested=m_requested,
                m_covered=sorted(m_covered),
                complete=set(m_requested) <= m_covered,
                file_name=file_name,
                m_stale=list(stale.get(key, ())),
            )
        )
    return shapes


def _is_current(environment: repo.EnvironmentRow, current: Provenance) -> bool:
    if environment.kernel_hash not in current.hashes:
        return False
    if current.triton_minor is None:
        return True
    try:
        return triton_minor(environment.triton) == current.triton_minor
    except ValueError:
        return False


def imported_only_note(
    device_name: str, imports: list[repo.ImportInfo], *, report: bool = False
) -> str:
    """The one line for a device with imported files and no sweeps: nothing was measured
    here, and where to see the files.

    Args:
        device_name: vLLM's device key, as stored.
        imports: its imported files (`repo.list_imports`), at least one.
        report: the line for the device's own report (which lists the files below it).
    """
    where = (
        "their entries are below, marked not measured, and the files under Imported files"
        if report
        else f"GET /devices/{device_name}/imports lists them, "
        f"GET /devices/{device_name}/report shows their entries"
    )
    return (
        f"only imported files ({imported_files_summary(imports)}), no sweeps: "
        f"nothing was measured here; {where}"
    )


def _imported(imports: list[repo.ImportInfo]) -> list[schemas.DeviceImport]:
    return [
        schemas.DeviceImport(
            label=i.label,
            file_name=i.file_name,
            N=i.N,
            K=i.K,
            block_shape=i.block_shape,
            m_keys=list(i.m_keys),
            m_left_out=sorted(i.cannot_launch),
        )
        for i in imports
    ]


def _device(
    session: Session, device_name: str, *, out_dtype: str | None, allow_stale: bool, swept: bool
) -> schemas.Device:
    view = read_device(session, device_name, out_dtype=out_dtype, allow_stale=allow_stale)
    imports = repo.list_imports(session, device_name=device_name)
    current = view.scope.current
    per_environment = Counter(row.environment_id for row in view.winners)
    tuned_with = [
        schemas.TunedWith(
            gpu_name=e.gpu_name,
            compute_capability=e.compute_capability,
            driver=e.driver,
            cuda=e.cuda,
            torch=e.torch,
            triton=e.triton,
            tuner=e.tuner,
            kernel_hash=e.kernel_hash,
            trials=e.trials,
            winners=per_environment.get(e.environment_id, 0),
            current=_is_current(e, current),
        )
        for e in view.environments
    ]
    return schemas.Device(
        device_name=device_name,
        shapes=_shapes(view),
        current=schemas.Provenance(
            kernel_hash=current.kernel_hash, triton_minor=current.triton_minor
        ),
        tuned_with=tuned_with,
        imported=_imported(imports),
        note=None if swept or not imports else imported_only_note(device_name, imports),
    )


def etag_matches(if_none_match: str | None, etag: str) -> bool:
    """RFC 9110 §13.1.2: weak comparison against each listed tag, or `*`."""
    if if_none_match is None:
        return False
    tags = [tag.strip() for tag in if_none_match.split(",")]
    return any(tag == "*" or tag.removeprefix("W/") == etag for tag in tags)


def _download(
    body: bytes,
    *,
    media_type: str,
    filename: str,
    if_none_match: str | None,
    sha256: str | None = None,
) -> Response:
    etag = f'"{sha256 or hashlib.sha256(body).hexdigest()}"'
    if etag_matches(if_none_match, etag):
        return Response(status_code=304, headers={"ETag": etag})
    headers = {
        "ETag": etag,
        "Content-Disposition": f'attachment; filename="{filename}"',
        "Cache-Control": "no-cache",  # the store changes: revalidate with If-None-Match
    }
    return Response(content=body, media_type=media_type, headers=headers)


@router.get(
    "",
    response_model=list[schemas.Device],
    description=(
        "Every device in the store, swept or with imported files only, with, per swept shape, its "
        "M grid and which M have a winner, the versions (GPU, driver, CUDA, torch, Triton, tuner, "
        "kernel hash) its files were tuned with, and its imported files (label, name, M keys, M "
        "left out by the launch check). A device with imported files only has `shapes` and "
        "`tuned_with` empty and a `note` saying so. Devices are sorted by name, shapes by (N, K, "
        "block_shape), versions by trials (most first), imports by (N, K, block_shape, label)."
    ),
)
def list_devices(
    session: SessionDep, out_dtype: OutDtype = None, allow_stale: AllowStale = False
) -> list[schemas.Device]:
    """List the store's devices with their shapes' coverage, tuning versions and imports."""
    swept = set(repo.list_device_names(session))
    return [
        _device(session, name, out_dtype=out_dtype, allow_stale=allow_stale, swept=name in swept)
        for name in repo.known_device_names(session)
    ]


@router.get(
    "/{device_name}/preview/configs",
    response_model=schemas.DeviceConfigs,
    responses={404: {"description": "Unknown device"}},
    description=(
        "What the next publish would contain: the merged files of a device, with hashes and merge "
        "notes, and the shapes left out (merged on every request). Files are sorted by (N, K, "
        "block_shape); each skipped shape has its reason (saying which M have only stale trials); "
        "SGLang names come with a note that SGLang's kernel differs. 404 for an unknown device, "
        "409 if the winners cannot be merged."
    ),
)
def preview_configs(
    device_name: KnownDevice,
    session: SessionDep,
    settings: SettingsDep,
    partial: Partial = None,
    out_dtype: OutDtype = None,
    engine: Engine = "vllm",
    allow_stale: AllowStale = False,
) -> schemas.DeviceConfigs:
    """List the files the device's next publish would hold, merged on this request."""
    allow = settings.allow_partial if partial is None else partial
    read = store_files(
        session,
        device_name,
        partial=allow,
        out_dtype=out_dtype,
        engine=engine,
        allow_stale=allow_stale,
    )
    merged = read.files
    files = [
        schemas.ConfigFile(
            file_name=f.file_name,
            N=f.N,
            K=f.K,
            block_shape=f.block_shape,
            sha256=f.merged.sha256,
            m_keys=list(f.merged.configs),
            partial=f.merged.partial,
            m_missing=f.merged.m_missing,
            notes=f.merged.notes,
            warnings=f.merged.warnings,
            m_imported=f.merged.m_imported,
        )
        for f in merged.files
    ]
    skipped = [
        schemas.SkippedShape(
            N=s.N,
            K=s.K,
            block_shape=s.block_shape,
            m_missing=s.m_missing,
            reason=s.reason,
        )
        for s in read.explained(HTTP_STALE_HINT).skipped
    ]
    return schemas.DeviceConfigs(
        device_name=device_name,
        files=files,
        skipped=skipped,
        engine=engine,
        engine_note=SGLANG_NOTE if engine == "sglang" else None,
    )


@router.get(
    "/{device_name}/preview/configs.zip",
    response_class=Response,
    response_model=None,
    responses={200: {"content": {"application/zip": {}}}, **FILE_RESPONSES},
    description=(
        "The merged files of a device and a README.txt as one zip (deterministic bytes), merged "
        "on this request (the release route serves what was published); 304 if the client's copy "
        "is current. 404 for an unknown device, 409 if the winners cannot be merged."
    ),
)
def preview_zip(
    device_name: KnownDevice,
    session: SessionDep,
    settings: SettingsDep,
    partial: Partial = None,
    out_dtype: OutDtype = None,
    engine: Engine = "vllm",
    allow_stale: AllowStale = False,
    if_none_match: IfNoneMatch = None,
) -> Response:
    """Download the device's merged files as one zip, merged on this request."""
    allow = settings.allow_partial if partial is None else partial
    read = store_files(
        session,
        device_name,
        partial=allow,
        out_dtype=out_dtype,
        engine=engine,
        allow_stale=allow_stale,
    )
    suffix = "" if engine == "vllm" else f"-{engine}"
    archive = build_zip(
        device_name, read.files, engine=engine, compute_capability=read.view.compute_capability
    )
    return _download(
        archive,
        media_type="application/zip",
        filename=f"{device_name}-configs{suffix}.zip",
        if_none_match=if_none_match,
    )


@router.get(
    "/{device_name}/preview/configs/{file_name}",
    response_class=Response,
    response_model=None,
    responses={200: {"content": {"application/json": {}}}, **FILE_RESPONSES},
    description=(
        'One merged file as the next publish would hold it (`ETag: "<sha256>"`), merged on '
        "this request (the release route serves what was published); 304 if the client's copy is "
        "current. 404 for an unknown device, a name that is not a config file name, a file of "
        "another device, or a shape with no (complete) file (the detail lists the device's "
        "files); 409 if the winners cannot be merged."
    ),
)
def preview_file(
    device_name: KnownDevice,
    file_name: FileName,
    session: SessionDep,
    settings: SettingsDep,
    partial: Partial = None,
    out_dtype: OutDtype = None,
    engine: Engine = "vllm",
    allow_stale: AllowStale = False,
    if_none_match: IfNoneMatch = None,
) -> Response:
    """Download one merged file as the next publish would hold it."""
    allow = settings.allow_partial if partial is None else partial
    read = store_files(
        session,
        device_name,
        partial=allow,
        out_dtype=out_dtype,
        engine=engine,
        allow_stale=allow_stale,
    )
    merged = read.files
    names = ", ".join(f.file_name for f in merged.files) or "(none)"
    try:
        family = family_of_file(file_name)
        wanted_name = family.respell(file_name, "vllm")
    except ValueError as exc:
        raise HTTPException(404, detail=f"{exc}; files: {names}") from None
    for f in merged.files:  # matched by the name in vLLM's spelling
        if f.family == family.name and family.respell(f.file_name, "vllm") == wanted_name:
            return _download(
                f.merged.text.encode(),
                media_type="application/json",
                filename=f.file_name,
                if_none_match=if_none_match,
                sha256=f.merged.sha256,
            )
    wanted_shape, named_device, _ = family.files.parse_file_name(file_name)
    if family.files.file_device(named_device) != family.files.file_device(device_name):
        raise HTTPException(
            404, detail=f"{file_name!r} names device {named_device!r}, not {device_name!r}"
        )
    wanted_file = family.files.file_name(wanted_shape, device_name, "vllm")
    for s in merged.skipped:
        if (
            s.family == family.name
            and family.files.file_name(s.key.shape, device_name, "vllm") == wanted_file
        ):
            hint = "; ?partial=true serves what there is" if s.m_missing and not allow else ""
            hint += read.stale_reason(s, HTTP_STALE_HINT)
            raise HTTPException(404, detail=f"no file {wanted_name!r} yet: {s.reason}{hint}")
    raise HTTPException(404, detail=f"no file {wanted_name!r} for {device_name}; files: {names}")
