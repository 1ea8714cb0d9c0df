"""Imported config files: existing files (for example vLLM's own) kept per device and shape.

Re-exported by `db.repo`; like the repository functions these take a Session, are keyword-only,
never commit, and return frozen dataclasses. The entries are stored as given (AMD keys kept) and
are never measured here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from db.devices import get_or_create_device
from db.engine import dialect_insert
from db.models import Device, ImportedFile, utcnow

MAX_LABEL = 128


@dataclass(frozen=True)
class ImportInfo:
    """One imported file: its device and shape, label, name, sha256 and entries (M -> config)."""

    import_id: int
    device_name: str
    N: int
    K: int
    block_shape: tuple[int, int]
    label: str
    file_name: str
    sha256: str
    configs: dict[int, dict[str, int]]
    created_at: datetime

    @property
    def m_keys(self) -> tuple[int, ...]:
        """The file's M keys, ascending."""
        return tuple(sorted(self.configs))


@dataclass(frozen=True)
class ImportedShape:
    """What the imports of one (N, K, block_shape) give a merge.

    Attributes:
        configs: M -> config; for an M in several imports, the latest import's entry.
        labels: M -> the label of the import that entry came from.
    """

    configs: dict[int, dict[str, int]]
    labels: dict[int, str]


def _info(row: ImportedFile, device_name: str) -> ImportInfo:
    return ImportInfo(
        import_id=row.import_id, device_name=device_name, N=row.N, K=row.K,
        block_shape=(row.block_n, row.block_k), label=row.label, file_name=row.file_name,
        sha256=row.sha256, configs={int(M): dict(entry) for M, entry in row.configs.items()},
        created_at=row.created_at,
    )


def record_import(
    session: Session,
    *,
    device_name: str,
    N: int,
    K: int,
    block_shape: tuple[int, int],
    label: str,
    file_name: str,
    sha256: str,
    configs: Mapping[int, Mapping[str, int]],
) -> ImportInfo:
    """Store a file's entries for a device and shape; the same label again replaces them.

    Args:
        session: the open session.
        device_name: vLLM's device key to store the entries for (added if new).
        N: rows of the weight B [N, K].
        K: columns of B [N, K].
        block_shape: [group_n, group_k].
        label: where the file comes from, e.g. "vllm-0.33.0".
        file_name: the file's name as given.
        sha256: hex sha256 of the file's bytes.
        configs: M -> config, already checked (tuner.files.format.parse_config_file).

    Returns:
        The stored import.

    Raises:
        ValueError: an empty or over-long label, no entries, or a bad device_name.
    """
    if not label.strip() or len(label) > MAX_LABEL:
        raise ValueError(f"label must be 1..{MAX_LABEL} characters, got {len(label)}")
    if not configs:
        raise ValueError("no M entries to import")
    device_id = get_or_create_device(session, device_name=device_name)
    values = {
        "device_id": device_id, "N": int(N), "K": int(K), "block_n": int(block_shape[0]),
        "block_k": int(block_shape[1]), "label": label, "file_name": file_name[:512],
        "sha256": sha256, "configs": {str(M): dict(configs[M]) for M in sorted(configs)},
        "created_at": utcnow(),
    }
    keys = ["device_id", "N", "K", "block_n", "block_k", "label"]
    session.execute(
        dialect_insert(session, ImportedFile)
        .values(**values)
        .on_conflict_do_update(
            index_elements=keys,
            set_={name: values[name] for name in ("file_name", "sha256", "configs", "created_at")},
        )
    )
    row = session.scalars(
        select(ImportedFile).where(*(getattr(ImportedFile, k) == values[k] for k in keys))
        .execution_options(populate_existing=True)
    ).one()
    return _info(row, device_name)


def list_imports(session: Session, *, device_name: str | None = None) -> list[ImportInfo]:
    """Imported files, of one device or all.

    Args:
        session: the open session.
        device_name: only this device; None for all.

    Returns:
        Sorted by (device_name, N, K, block_shape, label).
    """
    query = select(ImportedFile, Device.device_name).join(
        Device, ImportedFile.device_id == Device.device_id
    )
    if device_name is not None:
        query = query.where(Device.device_name == device_name)
    rows = [_info(row, name) for row, name in session.execute(query)]
    return sorted(rows, key=lambda i: (i.device_name, i.N, i.K, i.block_shape, i.label))


def list_import_device_names(session: Session) -> list[str]:
    """The device_name keys that have at least one import.

    Args:
        session: the open session.

    Returns:
        The names, sorted.
    """
    names = session.scalars(
        select(Device.device_name)
        .where(select(ImportedFile.import_id)
               .where(ImportedFile.device_id == Device.device_id).exists())
        .order_by(Device.device_name)
    )
    return list(names)


def imported_configs(
    session: Session, *, device_name: str
) -> dict[tuple[int, int, tuple[int, int]], ImportedShape]:
    """Per (N, K, block_shape) of a device, the imported entries a merge can fall back on.

    Where several imports carry an M, the latest import (by created_at, then import_id) wins.

    Args:
        session: the open session.
        device_name: vLLM's device key.

    Returns:
        (N, K, block_shape) -> entries and the label of each.
    """
    merged: dict[tuple[int, int, tuple[int, int]], ImportedShape] = {}
    ordered = sorted(list_imports(session, device_name=device_name),
                     key=lambda i: (i.created_at, i.import_id))
    for item in ordered:
        shape = merged.setdefault((item.N, item.K, item.block_shape), ImportedShape({}, {}))
        for M, entry in item.configs.items():
            shape.configs[M] = entry
            shape.labels[M] = item.label
    return merged
