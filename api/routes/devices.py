"""Devices in the store: their coverage, `tuner compare` runs, the preview of their merged
vLLM config files (merged on each request; the release routes serve what was published), their
imported config files (list them, or import one: token-protected) and their HTML report
(latency and speedup over M per shape, gaps, versions)."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable
from contextlib import suppress
from dataclasses import asdict
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Response
from fastapi.responses import HTMLResponse
from sqlalchemy.orm import Session

from api import deps, schemas
from api.report import render_report, report_shapes
from db import repo
from tuner.files.archive import build_zip
from tuner.files.device import (
    HTTP_STALE_HINT,
    MergeError,
    StoreFiles,
    imported_files_summary,
    read_device,
    target_device,
)
from tuner.files.format import coverage_summary, m_coverage, parse_file_for_import
from tuner.files.release import NothingToPublish, publish
from tuner.kernels.engines import SGLANG_NOTE
from tuner.kernels.family import KernelFamily
from tuner.kernels.registry import family_of_file, get_family
from tuner.kernels.shape import FamilyShape, Shape

router = APIRouter(prefix="/devices")
DEVICES: Any = {"tags": ["devices"]}  # the other routes here are of imports and the report


def file_responses(media_type: str) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI answers of a file route."""
    return {
        200: {"content": {media_type: {}}},
        304: {"description": "If-None-Match matched the ETag"},
        404: {"description": "Unknown device or file"},
    }


def download(
    body: bytes | Callable[[], bytes],
    *,
    sha256: str,
    filename: str,
    if_none_match: str | None,
    headers: dict[str, str] | None = None,
) -> Response:
    """A file's answer, `ETag: "<sha256>"`: 304 when If-None-Match lists it (or `*`; RFC 9110
    13.1.2, weak comparison), else the bytes (`body`, or what it reads) as an attachment."""
    etag = f'"{sha256}"'
    headers = {"ETag": etag, "Cache-Control": "no-cache", **(headers or {})}
    if {"*", etag} & {tag.strip().removeprefix("W/") for tag in (if_none_match or "").split(",")}:
        return Response(status_code=304, headers=headers)
    headers["Content-Disposition"] = f'attachment; filename="{filename}"'
    media_type = "application/zip" if filename.endswith(".zip") else "application/json"
    return Response(
        body if isinstance(body, bytes) else body(), media_type=media_type, headers=headers
    )


def vllm_name(file_name: str, device_name: str, files: str) -> tuple[KernelFamily, Shape, str]:
    """The family and shape of a requested file name and the vLLM name it has for
    `device_name`; 404 when it is no config file name (the detail lists `files`) or names
    another device."""
    try:
        family = family_of_file(file_name)
        shape, named, _ = family.files.parse_file_name(file_name)
    except ValueError as exc:
        raise HTTPException(404, detail=f"{exc}; files: {files}") from None
    if family.files.file_device(named) != family.files.file_device(device_name):
        raise HTTPException(404, f"{file_name!r} names device {named!r}, not {device_name!r}")
    return family, shape, family.files.file_name(shape, device_name, "vllm")


Merged = tuple[str, deps.MergeQuery, StoreFiles]  # the device, the query and its merge


def merged(
    device_name: deps.KnownDevice,
    query: Annotated[deps.MergeQuery, Query()],
    session: deps.SessionDep,
    settings: deps.SettingsDep,
) -> Merged:
    """The device's files merged on this request."""
    return device_name, query, query.files(session, device_name, settings)


PreviewDep = Annotated[Merged, Depends(merged)]


def imported_only_note(imports: list[repo.ImportInfo]) -> str:
    """The line for a device with imported files and no sweeps: nothing was measured here."""
    summary = imported_files_summary(imports)
    return f"only imported files ({summary}), no sweeps: nothing was measured here"


def _device(
    session: Session, name: str, swept: bool, out_dtype: str | None, allow_stale: bool
) -> schemas.Device:
    view = read_device(session, name, out_dtype=out_dtype, allow_stale=allow_stale)
    covered: dict[FamilyShape, set[int]] = {}
    for row in view.winners:
        covered.setdefault(FamilyShape.of_row(row), set()).add(row.M)
    shapes = [
        schemas.ShapeCoverage(
            **asdict(c),
            m_covered=sorted(done),
            complete=set(c.m_requested) <= done,
            file_name=get_family(key.family).files.file_name(key.shape, name, "vllm"),
        )
        for c in sorted(view.coverage, key=FamilyShape.of_row)  # a winner's shape has a task
        for key in [FamilyShape.of_row(c)]
        for done in [covered.get(key, set())]
    ]
    current, winners = view.scope.current, Counter(row.environment_id for row in view.winners)
    matching = repo.matching_environments(session, current.hashes, current.triton_minor) or []
    tuned_with = [
        schemas.TunedWith(
            **asdict(e), winners=winners[e.environment_id], current=e.environment_id in matching
        )
        for e in view.environments
    ]
    imports = repo.list_imports(session, device_name=name)
    return schemas.Device(
        device_name=name,
        shapes=shapes,
        current=schemas.Provenance(**asdict(current)),
        tuned_with=tuned_with,
        imported=[imported_file(i) for i in imports],
        note=None if swept or not imports else imported_only_note(imports),
    )


@router.get("", response_model=list[schemas.Device], **DEVICES)
def list_devices(
    session: deps.SessionDep,
    out_dtype: deps.OutDtypeQuery = None,
    allow_stale: deps.AllowStale = False,
) -> list[schemas.Device]:
    """Every device in the store, swept or with imported files only.

    With, per swept shape, its M grid and which M have a winner, the versions (GPU, driver,
    CUDA, torch, Triton, tuner, kernel hash) its files were tuned with, and its imported files
    (label, name, M keys, M left out by the launch check). A device with imported files only has
    `shapes` and `tuned_with` empty and a `note` saying so. Devices are sorted by name, shapes by
    (N, K, block_shape), versions by trials (most first), imports by (N, K, block_shape, label).
    """
    swept = set(repo.known_device_names(session, swept=True))
    return [
        _device(session, name, name in swept, out_dtype, allow_stale)
        for name in repo.known_device_names(session)
    ]


@router.get("/{device_name}/comparisons", response_model=list[repo.ComparisonInfo], **DEVICES)
def list_comparisons(
    device_name: deps.KnownDevice,
    session: deps.SessionDep,
    limit: Annotated[int, Query(ge=1, le=100, description="At most this many runs.")] = 10,
) -> list[repo.ComparisonInfo]:
    """The device's `tuner compare` runs, newest first.

    Per (N, K, M) each kernel's median latency in microseconds (status ok; else failed or
    unavailable, with why in `note`), the decode and prefill verdicts, and whose Triton kernel
    was timed (`kernel_source` builtin or vllm, and vLLM's version). 404 for an unknown device.
    """
    return repo.list_comparisons(session, device_name=device_name, limit=limit)


@router.get("/{device_name}/preview/configs", response_model=schemas.DeviceConfigs, **DEVICES)
def preview_configs(merged: PreviewDep) -> schemas.DeviceConfigs:
    """What the next publish would contain, merged on this request.

    The merged files of a device, with hashes and merge notes, and the shapes left out. Files
    are sorted by (N, K, block_shape); each skipped shape has its reason (saying which M have
    only stale trials); SGLang names come with a note that SGLang's kernel differs. 404 for an
    unknown device, 409 if the winners cannot be merged.
    """
    device_name, query, read = merged
    files = [
        schemas.ConfigFile(
            **asdict(f.merged),
            **asdict(f.key.shape),
            file_name=f.file_name,
            m_keys=list(f.merged.configs),
        )
        for f in read.files.files
    ]
    skipped = [
        schemas.SkippedShape(**asdict(s.key.shape), reason=s.reason, m_missing=s.m_missing)
        for s in read.explained(HTTP_STALE_HINT).skipped
    ]
    engine = query.engine
    note = SGLANG_NOTE if engine == "sglang" else None
    return schemas.DeviceConfigs(
        device_name=device_name, files=files, skipped=skipped, engine=engine, engine_note=note
    )


@router.get(
    "/{device_name}/preview/configs.zip",
    response_class=Response,
    responses=file_responses("application/zip"),
    **DEVICES,
)
def preview_zip(merged: PreviewDep, if_none_match: deps.IfNoneMatch = None) -> Response:
    """The device's merged files and a README.txt as one zip, merged on this request.

    Deterministic bytes, `ETag: "<sha256>"`; 304 if the client's copy is current (the release
    route serves what was published). 404 for an unknown device, 409 if the winners cannot be
    merged.
    """
    name, query, read = merged
    engine = query.engine
    archive = build_zip(
        name, read.files, engine=engine, compute_capability=read.view.compute_capability
    )
    suffix = "" if engine == "vllm" else f"-{engine}"
    sha256 = hashlib.sha256(archive).hexdigest()
    return download(
        archive, sha256=sha256, filename=f"{name}-configs{suffix}.zip", if_none_match=if_none_match
    )


@router.get(
    "/{device_name}/preview/configs/{file_name}",
    response_class=Response,
    responses=file_responses("application/json"),
    **DEVICES,
)
def preview_file(
    file_name: deps.FileName,
    merged: PreviewDep,
    if_none_match: deps.IfNoneMatch = None,
) -> Response:
    """One merged file as the next publish would hold it, merged on this request.

    `ETag: "<sha256>"`; 304 if the client's copy is current (the release route serves what was
    published). 404 for an unknown device, a name that is not a config file name, a file of
    another device, or a shape with no (complete) file (the detail lists the device's files);
    409 if the winners cannot be merged.
    """
    device_name, _, read = merged
    names = ", ".join(f.file_name for f in read.files.files) or "(none)"
    family, _, name = vllm_name(file_name, device_name, names)

    def named(key: FamilyShape) -> bool:
        return (
            key.family == family.name
            and family.files.file_name(key.shape, device_name, "vllm") == name
        )

    for f in read.files.files:
        if named(f.key):
            text = f.merged.text.encode()
            return download(
                text, sha256=f.merged.sha256, filename=f.file_name, if_none_match=if_none_match
            )
    for s in read.files.skipped:
        if named(s.key):
            raise HTTPException(404, detail=f"no file {name!r} yet: {s.reason}")
    raise HTTPException(404, detail=f"no file {name!r} for {device_name}; files: {names}")


def imported_file(item: repo.ImportInfo, note: str | None = None) -> schemas.ImportedFile:
    """An imported file as the API answers it, with its coverage of vLLM's M grid."""
    keys = list(item.m_keys)
    present, missing, extra = m_coverage(keys)
    coverage = schemas.MCoverage(
        grid_present=present, grid_missing=missing, extra=extra, summary=coverage_summary(keys)
    )
    return schemas.ImportedFile(
        **asdict(item),
        m_keys=keys,
        m_left_out=sorted(item.cannot_launch),
        coverage=coverage,
        note=note,
    )


@router.get("/{device_name}/imports", response_model=list[schemas.ImportedFile], tags=["imports"])
def list_imported(
    device_name: deps.KnownDevice, session: deps.SessionDep
) -> list[schemas.ImportedFile]:
    """The files imported for a device, with each file's coverage of vLLM's M grid.

    Sorted by (N, K, block_shape, label); empty for a device with sweeps and no imports. 404
    naming the known devices, for a device with neither.
    """
    return [imported_file(item) for item in repo.list_imports(session, device_name=device_name)]


@router.post(
    "/{device_name}/imports",
    response_model=schemas.ImportedFile,
    status_code=201,
    dependencies=[deps.WriteAccess],
    tags=["imports"],
    responses={
        401: {"description": "Missing or wrong bearer token"},
        403: {"description": "No TUNER_API_TOKEN"},
    },
)
def import_file(
    device_name: deps.DeviceName, body: schemas.ImportRequest, session: deps.SessionDep
) -> schemas.ImportedFile:
    """Keep an existing file's configs (e.g. one shipped with vLLM) as a labelled source.

    Answers the stored import with its coverage of vLLM's 18 M values. The file is checked whole
    before anything is stored, then the device's files are published as its next release (when
    any shape is complete). Its entries fill M that have no measured winner when the device's
    files are merged; they are never measured and never claimed to beat the default. Importing
    the same label again replaces the entries. The service compiles nothing (it loads no
    Triton), so its imports are stored without a launch check (`checked_arch` null); `tuner
    import` compiles the entries for the device and leaves out those that cannot launch there.

    The path names the device to store for: one in the store, or the file's own device. 401
    without the token (403: the service has none); 422
    for a bad name or body (one line naming the file), or a path device that is neither known
    nor the file's.
    """
    try:
        parsed = parse_file_for_import(body.file_name, body.content.encode("utf-8"))
        named = parsed.device_name
        target = target_device(device_name, named, repo.known_device_names(session))
    except (ValueError, LookupError) as exc:  # the CLI refuses it too: a typo never makes a device
        raise HTTPException(422, detail=str(exc)) from None
    item = repo.record_import(
        session,
        device_name=target,
        **parsed.store_fields,
        label=body.label,
        file_name=body.file_name,
        sha256=parsed.sha256,
        configs=parsed.configs,
    )
    # As `tuner import` does: the device's files with this import are the next release; with
    # nothing complete to publish yet, the import is kept all the same.
    with suppress(NothingToPublish, MergeError):
        publish(session, target, reason="HTTP import")
    return imported_file(
        item, None if target == named else f"stored for {target}; the file is named for {named}"
    )


@router.get(
    "/{device_name}/report",
    response_class=HTMLResponse,
    responses={404: {"description": "Unknown device"}},
    tags=["report"],
)
def read_report(
    device_name: deps.KnownDevice,
    session: deps.SessionDep,
    out_dtype: deps.OutDtypeQuery = None,
    allow_stale: deps.AllowStale = False,
) -> str:
    """An HTML page on the device's tuning, per shape.

    Winner and default latency over M (log scales), speedup over the default, achieved bandwidth
    and throughput, the re-timing's spread and why a decided winner was kept, coverage gaps, the
    imported files (label, M keys, entries left out by the launch check), and the environments;
    inline SVG charts rendered on the server, no script. A device with imported files only shows
    their entries, marked not measured.

    Winners come from trials of the current kernel source and Triton major.minor only (as the
    file routes serve them), unless allow_stale; the page says which, and how many ok trials of
    other versions it left out. 404 for an unknown device.
    """
    view = read_device(session, device_name, out_dtype=out_dtype, allow_stale=allow_stale)
    comparisons = repo.list_comparisons(session, device_name=device_name, limit=1)
    imports = repo.list_imports(session, device_name=device_name)
    swept = device_name in repo.known_device_names(session, swept=True)
    return render_report(
        device_name,
        report_shapes(view),
        [asdict(e) for e in view.environments],
        out_dtype=out_dtype,
        scope=view.scope,
        compute_capability=view.compute_capability,
        comparison=comparisons[0] if comparisons else None,
        imports=imports,
        imported_only=None if swept else imported_only_note(imports),
        abs_=repo.list_abs(session, device_name=device_name),
    )
