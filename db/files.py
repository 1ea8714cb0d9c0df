"""Files the store keeps beside its timings: imported config files (existing files, for example
vLLM's own, kept per device and shape as labelled sources), releases (a device's files frozen as
published, numbered per device, never changed; every file's and archive's bytes stored once per
sha256) and `tuner compare` runs.

Like every repository function these are keyword-only, take a Session, never commit and return
frozen dataclasses. Imported entries are stored as given (AMD keys kept) and never measured
here; with them, the verdict of `tuner import`'s launch check, which merges honour.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Select, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from db.ab import AbVerdict, release_ab
from db.connection import dialect_insert
from db.models import (
    Blob,
    Comparison,
    ComparisonPoint,
    Device,
    Environment,
    ImportedFile,
    Release,
    ReleaseFile,
    block_columns,
    block_shape_of,
    take,
    utcnow,
)
from db.work import get_or_create_device
from tuner.core import ComparisonStatus

# --- imports ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImportInfo:
    """One imported file: its device and shape, label, name, sha256 and entries (M -> config).

    `checked_arch`: the compute capability (89) the entries were compiled for at import, None
    when not checked; `cannot_launch`: M -> why its entry cannot launch there; `family` the
    kernel family the name parses as, `shape_params` its dimensions beyond N and K ("E=8").
    """

    import_id: int
    device_name: str
    N: int
    K: int
    block_shape: tuple[int, int] | None
    label: str
    file_name: str
    sha256: str
    configs: dict[int, dict[str, int]]
    created_at: datetime
    family: str
    shape_params: str
    checked_arch: int | None = None
    cannot_launch: dict[int, str] = field(default_factory=dict)

    @property
    def m_keys(self) -> tuple[int, ...]:
        """The file's M keys, ascending."""
        return tuple(sorted(self.configs))


@dataclass(frozen=True)
class ImportedShape:
    """What the imports of one shape (`ImportKey`) give a merge: `configs` M -> entry (of an M
    in several imports, the latest import's that can launch), `labels` M -> its import's label,
    `left_out` M -> (label, why it cannot launch) of entries the launch check left out."""

    configs: dict[int, dict[str, int]]
    labels: dict[int, str]
    left_out: dict[int, tuple[str, str]] = field(default_factory=dict)


# (family, shape_params, N, K, block_shape): the file an import is, as its name says.
ImportKey = tuple[str, str, int, int, tuple[int, int] | None]


def _import_info(row: ImportedFile, device_name: str) -> ImportInfo:
    return take(
        ImportInfo,
        row,
        device_name=device_name,
        block_shape=block_shape_of(row.block_n, row.block_k),
        configs={int(M): dict(entry) for M, entry in row.configs.items()},
        cannot_launch={int(M): str(why) for M, why in (row.cannot_launch or {}).items()},
    )


def record_import(
    session: Session,
    *,
    device_name: str,
    N: int,
    K: int,
    block_shape: tuple[int, int] | None,
    label: str,
    file_name: str,
    sha256: str,
    configs: Mapping[int, Mapping[str, int]],
    checked_arch: int | None = None,
    cannot_launch: Mapping[int, str] | None = None,
    family: str,
    shape_params: str,
) -> ImportInfo:
    """Store a file's entries (M -> config, already checked) for a device and shape; the same
    shape (family, shape_params, N, K, block_shape) and label ("vllm-0.33.0") again replaces
    them (an upsert). `checked_arch`: the compute capability the entries were checked for
    (None: not checked); `cannot_launch`: M -> why its entry cannot launch there (stored, left
    out of every merge).

    Raises:
        ValueError: an empty or over-long label, no entries, or a bad device_name.
    """
    rejected = dict(cannot_launch or {})
    if not label.strip() or len(label) > 128:
        raise ValueError(f"label must be 1..128 characters, got {len(label)}")
    if not configs:
        raise ValueError("no M entries to import")
    block_n, block_k = block_columns(block_shape)
    key = {"device_id": get_or_create_device(session, device_name=device_name), "label": label}
    key |= {"N": int(N), "K": int(K), "block_n": block_n, "block_k": block_k}
    key |= {"family": family, "shape_params": shape_params}
    values: dict[str, Any] = {"file_name": file_name[:512], "sha256": sha256}
    values |= {"checked_arch": checked_arch, "created_at": utcnow()}
    values["configs"] = {str(M): dict(configs[M]) for M in sorted(configs)}
    values["cannot_launch"] = {str(M): str(rejected[M]) for M in sorted(rejected)}
    upsert = dialect_insert(session, ImportedFile).values(**key, **values)
    session.execute(upsert.on_conflict_do_update(index_elements=list(key), set_=values))
    found = select(ImportedFile).filter_by(**key).execution_options(populate_existing=True)
    return _import_info(session.scalars(found).one(), device_name)


def list_imports(session: Session, *, device_name: str | None = None) -> list[ImportInfo]:
    """Imported files of one device (None: all), sorted by (device_name, N, K, block_shape,
    family, shape_params, label); a file without block scales before those with."""
    order = [Device.device_name, ImportedFile.N, ImportedFile.K, ImportedFile.block_n]
    order += [ImportedFile.block_k, ImportedFile.family, ImportedFile.shape_params]
    query = (
        select(ImportedFile, Device.device_name).join(Device).order_by(*order, ImportedFile.label)
    )
    if device_name is not None:
        query = query.where(Device.device_name == device_name)
    return [_import_info(row, name) for row, name in session.execute(query)]


def imported_configs(session: Session, *, device_name: str) -> dict[ImportKey, ImportedShape]:
    """Per shape of a device (`ImportKey`), the imported entries a merge of that shape can fall
    back on (one family's files are never taken for another's, nor one E for another). Where
    several imports carry an M, the latest (created_at, import_id) that can launch wins; an
    entry that cannot launch is never used and is listed in `left_out`."""
    merged: dict[ImportKey, ImportedShape] = {}
    imports = list_imports(session, device_name=device_name)
    for item in sorted(imports, key=lambda i: (i.created_at, i.import_id)):
        key = (item.family, item.shape_params, item.N, item.K, item.block_shape)
        shape = merged.setdefault(key, ImportedShape({}, {}))
        for M, entry in item.configs.items():
            if M in item.cannot_launch:
                shape.left_out[M] = (item.label, item.cannot_launch[M])
            else:
                shape.configs[M], shape.labels[M] = entry, item.label
    return merged


# --- releases ---------------------------------------------------------------------------------


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
    who published it and why, when (UTC), its files sorted by name, and its latest A/B's
    verdict (`tuner ab --release`), if any."""

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
    ab: AbVerdict | None = None


def content_sha256(files: Sequence[NewFile]) -> str:
    """What makes two releases the same: sha256 of the sorted "name sha256" lines."""
    lines = sorted(f"{f.file_name} {f.sha256}\n" for f in files)
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def _release_info(session: Session, row: Release, device_name: str) -> ReleaseInfo:
    files = session.execute(
        select(ReleaseFile, Blob.size)
        .join(Blob, ReleaseFile.sha256 == Blob.sha256)
        .where(ReleaseFile.release_id == row.release_id)
        .order_by(ReleaseFile.file_name)
    )
    rows = [
        take(ReleaseFileRow, f, block_shape=block_shape_of(f.block_n, f.block_k), size=size)
        for f, size in files
    ]
    ab = release_ab(session, release_id=row.release_id)
    return take(ReleaseInfo, row, device_name=device_name, files=rows, ab=ab)


def _releases(*columns: Any, device_name: str, number: int | None = None) -> Select:
    """A device's releases, newest first; only `number` when given."""
    query = select(*columns).join(Device, Release.device_id == Device.device_id)
    query = query.where(Device.device_name == device_name).order_by(Release.number.desc())
    return query if number is None else query.where(Release.number == number)


def get_release(
    session: Session, *, device_name: str, number: int | None = None
) -> ReleaseInfo | None:
    """A device's release `number` (1, 2, ...), or its latest when None; None when there is no
    such one."""
    row = session.scalars(_releases(Release, device_name=device_name, number=number)).first()
    return None if row is None else _release_info(session, row, device_name)


def list_releases(session: Session, *, device_name: str) -> list[ReleaseInfo]:
    """A device's releases, newest first (with their files)."""
    rows = session.scalars(_releases(Release, device_name=device_name))
    return [_release_info(session, row, device_name) for row in rows]


def _store_blob(session: Session, content: bytes) -> str:
    sha = hashlib.sha256(content).hexdigest()
    blob_row = dialect_insert(session, Blob).values(sha256=sha, size=len(content), content=content)
    session.execute(blob_row.on_conflict_do_nothing(index_elements=["sha256"]))
    return sha


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
    """Freeze a device's files (distinct names) as its next release, with `archives` (engine ->
    zip bytes), `summary` (JSON-able), who published (user@host) and what ("tuner publish"),
    unless they equal the latest release's.

    The next number comes from a read of the latest release after this transaction has written
    the blobs: on SQLite it then holds the write lock; on PostgreSQL two publishers may read the
    same latest release, but only one can insert its successor (unique device_id, number): the
    other's insert fails, and its retry reads the release that was just committed.

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
    # Sorted, so two publishers inserting the same blobs never wait on each other in a cycle.
    for _, data in sorted({f.sha256: f.content for f in files}.items()):
        _store_blob(session, data)
    zips = {engine: _store_blob(session, data) for engine, data in sorted(archives.items())}
    for _ in range(5):
        last = session.scalars(_releases(Release, device_name=device_name)).first()
        if last is not None and last.content_sha256 == content:
            return _release_info(session, last, device_name), False
        number = (last.number if last is not None else 0) + 1
        row = Release(device_id=device_id, number=number, content_sha256=content, archives=zips)
        row.summary, row.created_by, row.reason = dict(summary), created_by[:256], reason[:64]
        if _inserted(session, row, files):
            return _release_info(session, row, device_name), True
    raise RuntimeError(f"could not number a release of {device_name}: too many publishers")


def _inserted(session: Session, row: Release, files: Sequence[NewFile]) -> bool:
    """Insert a release with its files in a savepoint; False when its number was taken."""
    try:
        with session.begin_nested():
            session.add(row)
            session.flush()
            session.add_all(_file_row(row.release_id, f) for f in files)
            session.flush()
    except IntegrityError:
        return False
    return True


def _file_row(release_id: int, f: NewFile) -> ReleaseFile:
    block_n, block_k = block_columns(f.block_shape)
    row = ReleaseFile(release_id=release_id, block_n=block_n, block_k=block_k, sha256=f.sha256)
    row.file_name, row.family, row.shape_params = f.file_name, f.family, f.shape_params
    row.N, row.K, row.detail = f.N, f.K, dict(f.detail)
    return row


def blob(session: Session, *, sha256: str) -> bytes | None:
    """The stored bytes of content `sha256`, or None."""
    return session.scalar(select(Blob.content).where(Blob.sha256 == sha256))


# --- comparisons ------------------------------------------------------------------------------


@dataclass(frozen=True)
class PointRow:
    """One kernel at one (N, K, M): `status` ok, failed or unavailable; times in microseconds
    (None unless ok); `note` the Triton config or the reason."""

    N: int
    K: int
    M: int
    backend: str
    status: ComparisonStatus
    latency_us: float | None
    p20_us: float | None
    p80_us: float | None
    note: str


@dataclass(frozen=True)
class ComparisonInfo:
    """One comparison run with its points (sorted by N, K, M, backend) and verdict lines."""

    comparison_id: int
    device_name: str
    gpu_name: str
    model: str
    tp: int
    out_dtype: str
    verdicts: tuple[str, ...]
    created_at: datetime
    points: tuple[PointRow, ...]
    kernel_source: str = "builtin"
    vllm: str = ""


def record_comparison(
    session: Session,
    *,
    device_name: str,
    environment_id: int,
    model: str,
    tp: int,
    out_dtype: str,
    verdicts: Sequence[str],
    points: Sequence[PointRow],
) -> int:
    """Store one comparison run (where it ran, the model and TP, the decode and prefill verdict
    lines) with every kernel at every (N, K, M), in one transaction; its comparison_id (a
    status other than `tuner.core.ComparisonStatus`'s breaks the table's check constraint).
    """
    row = Comparison(environment_id=environment_id, model=model, tp=tp, out_dtype=out_dtype)
    row.device_id = get_or_create_device(session, device_name=device_name)
    row.verdicts = list(verdicts)
    session.add(row)
    session.flush()
    session.add_all(ComparisonPoint(comparison_id=row.comparison_id, **vars(p)) for p in points)
    session.flush()
    return row.comparison_id


def list_comparisons(
    session: Session, *, device_name: str, limit: int = 20
) -> list[ComparisonInfo]:
    """A device's comparisons (at most `limit`), newest first, with their points sorted by (N,
    K, M, backend)."""
    runs = session.execute(
        select(Comparison, Environment)
        .join(Device, Comparison.device_id == Device.device_id)
        .join(Environment, Comparison.environment_id == Environment.environment_id)
        .where(Device.device_name == device_name)
        .order_by(Comparison.comparison_id.desc())
        .limit(limit)
    ).all()
    order = (ComparisonPoint.N, ComparisonPoint.K, ComparisonPoint.M, ComparisonPoint.backend)
    infos = []
    for run, env in runs:
        rows = session.scalars(
            select(ComparisonPoint).filter_by(comparison_id=run.comparison_id).order_by(*order)
        )
        points = tuple(take(PointRow, r, status=ComparisonStatus(r.status)) for r in rows)
        of_env = {"gpu_name": env.gpu_name, "kernel_source": env.kernel_source, "vllm": env.vllm}
        of_run = {"device_name": device_name, "points": points, "verdicts": tuple(run.verdicts)}
        infos.append(take(ComparisonInfo, run, **of_run, **of_env))
    return infos
