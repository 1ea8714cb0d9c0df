"""Imported config files of a device: list them, or import one (token-protected)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException

from api import schemas
from api.deps import SessionDep, WriteAccess
from api.routes.devices import DeviceName
from db import repo
from tuner.files.device import MergeError
from tuner.files.format import coverage_summary, m_coverage, parse_file_for_import
from tuner.files.imports import target_device
from tuner.files.release import NothingToPublish, publish
from tuner.inputs.devices import resolve

router = APIRouter(prefix="/devices", tags=["imports"])


def coverage(keys: list[int]) -> schemas.MCoverage:
    """Which of vLLM's 18 grid M values a file has, with a one-line summary.

    Args:
        keys: the file's M keys.

    Returns:
        Present and missing grid M, keys outside the grid, and the summary line.
    """
    present, missing, extra = m_coverage(keys)
    return schemas.MCoverage(
        grid_present=present, grid_missing=missing, extra=extra, summary=coverage_summary(keys)
    )


def _schema(item: repo.ImportInfo, note: str | None = None) -> schemas.ImportedFile:
    return schemas.ImportedFile(
        device_name=item.device_name,
        family=item.family,
        shape_params=item.shape_params,
        N=item.N,
        K=item.K,
        block_shape=item.block_shape,
        label=item.label,
        file_name=item.file_name,
        sha256=item.sha256,
        m_keys=list(item.m_keys),
        coverage=coverage(list(item.m_keys)),
        note=note,
        checked_arch=item.checked_arch,
        cannot_launch=item.cannot_launch,
    )


def _known(session: SessionDep) -> list[str]:
    return repo.known_device_names(session)


@router.get(
    "/{device_name}/imports",
    response_model=list[schemas.ImportedFile],
    responses={404: {"description": "No device by that name (sweeps or imports)"}},
    description=(
        "The files imported for a device, with each file's coverage of vLLM's M grid, sorted by "
        "(N, K, block_shape, label); empty for a device with sweeps and no imports. 404 naming "
        "the known devices, for a device with neither."
    ),
)
def list_imported(device_name: DeviceName, session: SessionDep) -> list[schemas.ImportedFile]:
    """List the files imported for a device with their M-grid coverage."""
    known = _known(session)
    names = [device_name] if device_name in known else resolve(device_name, known)
    if len(names) != 1:
        raise HTTPException(
            404, detail=f"unknown device {device_name!r}; known: {', '.join(known) or '(none)'}"
        )
    return [_schema(item) for item in repo.list_imports(session, device_name=names[0])]


@router.post(
    "/{device_name}/imports",
    response_model=schemas.ImportedFile,
    status_code=201,
    responses={
        401: {"description": "Missing or wrong bearer token"},
        403: {"description": "Writes are disabled (no TUNER_API_TOKEN)"},
        422: {
            "description": "Not a valid config file, or a device that is "
            "neither in the store nor the file's"
        },
    },
    description=(
        "Keep an existing file's configs (e.g. one shipped with vLLM) as a labelled source; "
        "answers the stored import with its coverage of vLLM's 18 M values.\n\n"
        "The file is checked whole before anything is stored, then the device's files are "
        "published as its next release (when any shape is complete). Its entries fill M that have "
        "no measured winner when the device's files are merged; they are never measured and never "
        "claimed to beat the default. Importing the same label again replaces the entries. The "
        "service compiles nothing (it loads no Triton), so its imports are stored without a launch "
        "check (`checked_arch` null); `tuner import` compiles the entries for the device and "
        "leaves out those that cannot launch there.\n\n"
        "The path names the device to store for: one in the store, or the file's own device. 422 "
        "for a bad name or body (one line naming the file), or a path device that is neither "
        "known nor the file's."
    ),
)
def import_file(
    device_name: DeviceName,
    body: schemas.ImportRequest,
    session: SessionDep,
    _write: WriteAccess,
    _known_devices: Annotated[list[str], Depends(_known)],
) -> schemas.ImportedFile:
    """Import an existing config file as a labelled source and publish."""
    try:
        parsed = parse_file_for_import(body.file_name, body.content.encode("utf-8"))
    except ValueError as exc:
        raise HTTPException(422, detail=str(exc)) from None
    try:
        target = target_device(device_name, parsed.name.device_name, _known_devices)
    except LookupError as exc:  # the CLI refuses it too: a typo never creates a device
        raise HTTPException(422, detail=str(exc)) from None
    item = repo.record_import(
        session,
        device_name=target,
        N=parsed.name.N,
        K=parsed.name.K,
        block_shape=parsed.name.block_shape,
        family=parsed.family,
        shape_params=parsed.name.params_text,
        label=body.label,
        file_name=body.file_name,
        sha256=parsed.sha256,
        configs=parsed.configs,
    )
    note = None
    if target != parsed.name.device_name:
        note = f"stored for {target}; the file is named for {parsed.name.device_name}"
    try:  # as `tuner import` does: the device's files with this import are the next release
        publish(session, target, reason="HTTP import")
    except (NothingToPublish, MergeError):
        pass  # nothing complete to publish yet; the import is kept all the same
    return _schema(item, note)
