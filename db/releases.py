"""Releases: a device's files frozen as published, numbered per device, never changed; the bytes
of every file and archive stored once per content (sha256).

Like the repository functions these take a Session, are keyword-only, and do not commit.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Row, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from db.connection import dialect_insert
from db.devices import get_or_create_device
from db.models import Blob, Device, Release, ReleaseFile, block_columns, block_shape_of, utcnow


@dataclass(frozen=True)
class NewFile:
    """A file to publish: vLLM's name, its kernel family and shape, its exact bytes and the
    merge's detail (m_keys, m_imported, m_missing, partial, notes, warnings)."""

    file_name: str
    N: int
    K: int
    block_shape: tuple[int, int] | None
    content: bytes
    detail: Mapping[str, Any]
    family: str
    shape_params: str = ""

    @property
    def sha256(self) -> str:
        """Hex sha256 of the bytes."""
        return hashlib.sha256(self.content).hexdigest()


@dataclass(frozen=True)
class ReleaseFileRow:
    """One file of a release as stored (its bytes are the blob `sha256`, `size` bytes)."""

    file_name: str
    N: int
    K: int
    block_shape: tuple[int, int] | None
    sha256: str
    size: int
    detail: dict[str, Any]
    family: str
    shape_params: str = ""


@dataclass(frozen=True)
class ReleaseInfo:
    """A release: its device, number, content hash, archives (engine -> zip sha256), summary,
    who published it and why, when (UTC), and its files sorted by name."""

    release_id: int
    device_name: str
    number: int
    content_sha256: str
    archives: dict[str, str]
    summary: dict[str, Any]
    created_by: str
    reason: str
    created_at: datetime
    files: list[ReleaseFileRow] = field(default_factory=list)


def content_sha256(files: Sequence[NewFile]) -> str:
    """What makes two releases the same: sha256 of the sorted "name sha256" lines."""
    lines = sorted(f"{f.file_name} {f.sha256}\n" for f in files)
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def _store_blob(session: Session, content: bytes) -> str:
    sha = hashlib.sha256(content).hexdigest()
    session.execute(
        dialect_insert(session, Blob)
        .values(sha256=sha, size=len(content), content=content)
        .on_conflict_do_nothing(index_elements=["sha256"])
    )
    return sha


def _device_id(session: Session, device_name: str) -> int | None:
    return session.scalar(select(Device.device_id).where(Device.device_name == device_name))


def _info(session: Session, row: Release, device_name: str) -> ReleaseInfo:
    files = session.execute(
        select(ReleaseFile, Blob.size)
        .join(Blob, ReleaseFile.sha256 == Blob.sha256)
        .where(ReleaseFile.release_id == row.release_id)
        .order_by(ReleaseFile.file_name)
    )
    return ReleaseInfo(
        release_id=row.release_id,
        device_name=device_name,
        number=row.number,
        content_sha256=row.content_sha256,
        archives=dict(row.archives),
        summary=dict(row.summary),
        created_by=row.created_by,
        reason=row.reason,
        created_at=row.created_at,
        files=[
            ReleaseFileRow(
                file_name=f.file_name,
                N=f.N,
                K=f.K,
                block_shape=block_shape_of(f.block_n, f.block_k),
                sha256=f.sha256,
                size=size,
                detail=dict(f.detail),
                family=f.family,
                shape_params=f.shape_params,
            )
            for f, size in files
        ],
    )


def get_release(
    session: Session, *, device_name: str, number: int | None = None
) -> ReleaseInfo | None:
    """A device's release `number`, or its latest when None; None when there is no such one.

    Args:
        session: the open session.
        device_name: vLLM's device key, as stored.
        number: the release number (1, 2, ...), or None for the latest.
    """
    query = (
        select(Release)
        .join(Device, Release.device_id == Device.device_id)
        .where(Device.device_name == device_name)
    )
    query = (
        query.order_by(Release.number.desc()).limit(1)
        if number is None
        else query.where(Release.number == number)
    )
    row = session.scalars(query).first()
    return None if row is None else _info(session, row, device_name)


def publish_release(
    session: Session,
    *,
    device_name: str,
    files: Sequence[NewFile],
    archives: Mapping[str, bytes],
    summary: Mapping[str, Any],
    created_by: str,
    reason: str,
) -> tuple[ReleaseInfo, bool]:
    """Freeze a device's files as its next release, unless they equal the latest release's.

    Args:
        session: the open session.
        device_name: vLLM's device key (added if new).
        files: the files (distinct names).
        archives: engine -> zip bytes of the files (e.g. "vllm", "sglang").
        summary: JSON-able scope, coverage, notes, skipped shapes, versions.
        created_by: who published (user@host).
        reason: what published ("tuner publish", "tuner sweep", "HTTP import", ...).

    Returns:
        (the new release, True), or (the latest release, False) when its files have the same
        names and bytes.

    Raises:
        ValueError: two files of one name, or a bad device_name.
    """
    names = [f.file_name for f in files]
    if len(set(names)) != len(names):
        raise ValueError(f"two files named alike among {names}")
    content = content_sha256(files)
    latest = get_release(session, device_name=device_name)
    if latest is not None and latest.content_sha256 == content:  # the common case: no write
        return latest, False
    device_id = get_or_create_device(session, device_name=device_name)
    shas, zips = _store_blobs(session, files, archives)
    # The check above may be stale: another publisher of the same files may have committed
    # since. So the unchanged check and the next number come from one read of the latest
    # release, made after this transaction has written. On SQLite it then holds the write
    # lock, so nobody commits in between; on PostgreSQL (read committed) two publishers may
    # read the same latest release, but only one can insert its successor (unique device_id,
    # number): the other's insert waits for that commit, fails, and its retry reads the
    # release that was just committed.
    for _ in range(5):
        last = _latest_row(session, device_id)
        if last is not None and last.content_sha256 == content:
            return _info(session, session.get_one(Release, last.release_id), device_name), False
        number = (last.number if last is not None else 0) + 1
        try:
            with session.begin_nested():
                row = Release(
                    device_id=device_id,
                    number=number,
                    content_sha256=content,
                    archives=zips,
                    summary=dict(summary),
                    created_by=created_by[:256],
                    reason=reason[:64],
                    created_at=utcnow(),
                )
                session.add(row)
                session.flush()
                _add_files(session, row, files, shas)
                session.flush()
        except IntegrityError:
            continue
        return _info(session, row, device_name), True
    raise RuntimeError(f"could not number a release of {device_name}: too many publishers")


def _store_blobs(
    session: Session,
    files: Sequence[NewFile],
    archives: Mapping[str, bytes],
) -> tuple[dict[str, str], dict[str, str]]:
    """Store the files' and archives' bytes once each (`_store_blob`).

    Returns:
        (file name -> blob sha256, engine -> the archive's blob sha256).
    """
    # Sorted, so two publishers inserting the same blobs never wait on each other in a cycle.
    stored = {
        sha: _store_blob(session, data)
        for sha, data in sorted((f.sha256, f.content) for f in files)
    }
    shas = {f.file_name: stored[f.sha256] for f in files}
    zips = {engine: _store_blob(session, data) for engine, data in sorted(archives.items())}
    return shas, zips


def _latest_row(session: Session, device_id: int) -> Row[int, int, str] | None:
    """The device's highest-numbered release: (release_id, number, content_sha256), or None."""
    return session.execute(
        select(Release.release_id, Release.number, Release.content_sha256)
        .where(Release.device_id == device_id)
        .order_by(Release.number.desc())
        .limit(1)
    ).first()


def _add_files(
    session: Session, row: Release, files: Sequence[NewFile], shas: Mapping[str, str]
) -> None:
    """Add the release's file rows (flushed `row`; `shas`: file name -> blob sha256)."""
    for f in files:
        block_n, block_k = block_columns(f.block_shape)
        session.add(
            ReleaseFile(
                release_id=row.release_id,
                file_name=f.file_name,
                family=f.family,
                shape_params=f.shape_params,
                N=f.N,
                K=f.K,
                block_n=block_n,
                block_k=block_k,
                sha256=shas[f.file_name],
                detail=dict(f.detail),
            )
        )


def list_releases(session: Session, *, device_name: str) -> list[ReleaseInfo]:
    """A device's releases, newest first (with their files)."""
    rows = session.scalars(
        select(Release)
        .join(Device, Release.device_id == Device.device_id)
        .where(Device.device_name == device_name)
        .order_by(Release.number.desc())
    )
    return [_info(session, row, device_name) for row in rows]


def list_release_device_names(session: Session) -> list[str]:
    """The device_name keys that have at least one release, sorted."""
    return list(
        session.scalars(
            select(Device.device_name)
            .where(select(Release.release_id).where(Release.device_id == Device.device_id).exists())
            .order_by(Device.device_name)
        )
    )


@dataclass(frozen=True)
class ReleasedFile:
    """What a download needs: the release number and the file's (or archive's) sha256."""

    number: int
    sha256: str


def find_released_file(
    session: Session, *, device_name: str, file_name: str, number: int | None = None
) -> ReleasedFile | None:
    """One row read for a file download: the file `file_name` of release `number` (the latest
    when None) of a device; None when the device has no such release or file.

    Args:
        session: the open session.
        device_name: vLLM's device key, as stored.
        file_name: vLLM's spelling of the file name.
        number: the release number, or None for the latest.
    """
    releases = (
        select(Release.release_id, Release.number)
        .join(Device, Release.device_id == Device.device_id)
        .where(Device.device_name == device_name)
    )
    release = (
        releases.order_by(Release.number.desc()).limit(1)
        if number is None
        else releases.where(Release.number == number)
    ).subquery()
    row = session.execute(
        select(release.c.number, ReleaseFile.sha256)
        .join(ReleaseFile, ReleaseFile.release_id == release.c.release_id)
        .where(ReleaseFile.file_name == file_name)
    ).first()
    return None if row is None else ReleasedFile(row.number, row.sha256)


def find_release_archive(
    session: Session, *, device_name: str, engine: str, number: int | None = None
) -> ReleasedFile | None:
    """One row read for a zip download: the archive of `engine` of release `number` (latest
    when None); None when there is no such release or archive."""
    query = (
        select(Release.number, Release.archives)
        .join(Device, Release.device_id == Device.device_id)
        .where(Device.device_name == device_name)
    )
    query = (
        query.order_by(Release.number.desc()).limit(1)
        if number is None
        else query.where(Release.number == number)
    )
    row = session.execute(query).first()
    if row is None or engine not in row.archives:
        return None
    return ReleasedFile(row.number, row.archives[engine])


def blob(session: Session, *, sha256: str) -> bytes | None:
    """The stored bytes of content `sha256`, or None."""
    return session.scalar(select(Blob.content).where(Blob.sha256 == sha256))
