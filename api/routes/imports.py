"""Imported config files of a device: list them, or import one (token-protected)."""

from __future__ import annotations

from dataclasses import asdict

from fastapi import APIRouter, HTTPException

from api import schemas
from api.deps import DeviceName, KnownDevice, SessionDep, WriteAccess
from db import repo
from tuner.files.device import MergeError, target_device
from tuner.files.format import coverage_summary, m_coverage, parse_file_for_import
from tuner.files.release import NothingToPublish, publish

router = APIRouter(prefix="/devices", tags=["imports"])


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


@router.get("/{device_name}/imports", response_model=list[schemas.ImportedFile])
def list_imported(device_name: KnownDevice, session: SessionDep) -> list[schemas.ImportedFile]:
    """The files imported for a device, with each file's coverage of vLLM's M grid.

    Sorted by (N, K, block_shape, label); empty for a device with sweeps and no imports. 404
    naming the known devices, for a device with neither.
    """
    return [imported_file(item) for item in repo.list_imports(session, device_name=device_name)]


@router.post(
    "/{device_name}/imports",
    response_model=schemas.ImportedFile,
    status_code=201,
    dependencies=[WriteAccess],
    responses={
        401: {"description": "Missing or wrong bearer token"},
        403: {"description": "No TUNER_API_TOKEN"},
    },
)
def import_file(
    device_name: DeviceName, body: schemas.ImportRequest, session: SessionDep
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
    try:  # as `tuner import` does: the device's files with this import are the next release
        publish(session, target, reason="HTTP import")
    except (NothingToPublish, MergeError):
        pass  # nothing complete to publish yet; the import is kept all the same
    return imported_file(
        item, None if target == named else f"stored for {target}; the file is named for {named}"
    )
