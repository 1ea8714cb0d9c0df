"""Imported config files: existing files (for example vLLM's own) kept per device and shape.

Re-exported by `db.repo`; like the repository functions these take a Session, are keyword-only,
never commit, and return frozen dataclasses. The entries are stored as given (AMD keys kept) and
are never measured here; with them, the verdict of `tuner import`'s launch check (which entries
cannot launch on the device), which merges honour.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from db.connection import dialect_insert
from db.devices import get_or_create_device
from db.models import Device, ImportedFile, block_columns, block_shape_of, utcnow

MAX_LABEL = 128


@dataclass(frozen=True)
class ImportInfo:
    """One imported file: its device and shape, label, name, sha256 and entries (M -> config).

    `checked_arch` is the compute capability (e.g. 89) the entries were compiled for at import,
    None when they were not checked; `cannot_launch` maps the M whose entry cannot launch there
    to the reason (config, shared memory needed and available); `family` is the kernel family
    the file's name parses as (`tuner.kernels.registry.family_of_file`) and `shape_params` the
    family's dimensions beyond N and K that the name carries, as tasks store them ("E=8";
    "" for none).
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
    """What the imports of one family's shape (`ImportKey`) give a merge.

    Attributes:
        configs: M -> config; for an M in several imports, the latest import's entry that can
            launch on the device.
        labels: M -> the label of the import that entry came from.
        left_out: M -> (label, why it cannot launch) for entries left out by the launch check
            (an M may also be in `configs`, from another import).
    """

    configs: dict[int, dict[str, int]]
    labels: dict[int, str]
    left_out: dict[int, tuple[str, str]] = field(default_factory=dict)


# (family, shape_params, N, K, block_shape): the shape an import is a file of, as its name
# says; two imports fill one file only when all five are equal.
ImportKey = tuple[str, str, int, int, tuple[int, int] | None]


def _info(row: ImportedFile, device_name: str) -> ImportInfo:
    return ImportInfo(
        import_id=row.import_id,
        device_name=device_name,
        N=row.N,
        K=row.K,
        block_shape=block_shape_of(row.block_n, row.block_k),
        label=row.label,
        file_name=row.file_name,
        sha256=row.sha256,
        configs={int(M): dict(entry) for M, entry in row.configs.items()},
        created_at=row.created_at,
        checked_arch=row.checked_arch,
        cannot_launch={int(M): str(reason) for M, reason in (row.cannot_launch or {}).items()},
        family=row.family,
        shape_params=row.shape_params,
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
    """Store a file's entries for a device and shape; the same label again replaces them (the
    shape: family, shape_params, N, K and block_shape).

    Args:
        session: the open session.
        device_name: vLLM's device key to store the entries for (added if new).
        N: rows of the weight B [N, K].
        K: columns of B [N, K].
        block_shape: [group_n, group_k]; None for a file without block scales.
        label: where the file comes from, e.g. "vllm-0.33.0".
        file_name: the file's name as given.
        sha256: hex sha256 of the file's bytes.
        configs: M -> config, already checked (tuner.files.format.parse_config_file).
        checked_arch: the compute capability the entries were compiled for, or None when they
            were not checked (the API's imports, devices of unknown architecture).
        cannot_launch: M -> why its entry cannot launch on `checked_arch`; those entries are
            stored but left out of every merge.
        family: the kernel family the file's name parses as
            (`tuner.kernels.registry.family_of_file`).
        shape_params: the family's dimensions beyond N and K in the file's name, as
            `tuner.kernels.shape.Shape.params_text` writes them ("E=8"; "" for none).

    Returns:
        The stored import.

    Raises:
        ValueError: an empty or over-long label, no entries, a bad device_name, or
            `cannot_launch` naming an M not in `configs` or given without `checked_arch`.
    """
    rejected = _checked_import(label, configs, checked_arch, cannot_launch)
    device_id = get_or_create_device(session, device_name=device_name)
    block_n, block_k = block_columns(block_shape)
    values = {
        "device_id": device_id,
        "N": int(N),
        "K": int(K),
        "block_n": block_n,
        "block_k": block_k,
        "label": label,
        "file_name": file_name[:512],
        "sha256": sha256,
        "configs": {str(M): dict(configs[M]) for M in sorted(configs)},
        "created_at": utcnow(),
        "checked_arch": checked_arch,
        "cannot_launch": {str(M): str(rejected[M]) for M in sorted(rejected)},
        "family": family,
        "shape_params": shape_params,
    }
    keys = ["device_id", "family", "shape_params", "N", "K", "block_n", "block_k", "label"]
    session.execute(
        dialect_insert(session, ImportedFile)
        .values(**values)
        .on_conflict_do_update(
            index_elements=keys,
            set_={
                name: values[name]
                for name in (
                    "file_name",
                    "sha256",
                    "configs",
                    "created_at",
                    "checked_arch",
                    "cannot_launch",
                )
            },
        )
    )
    row = session.scalars(
        select(ImportedFile)
        .where(*(getattr(ImportedFile, k) == values[k] for k in keys))
        .execution_options(populate_existing=True)
    ).one()
    return _info(row, device_name)


def _checked_import(
    label: str,
    configs: Mapping[int, Mapping[str, int]],
    checked_arch: int | None,
    cannot_launch: Mapping[int, str] | None,
) -> dict[int, str]:
    """`record_import`'s checks of its arguments; returns `cannot_launch` as a dict.

    Raises:
        ValueError: as `record_import`.
    """
    if not label.strip() or len(label) > MAX_LABEL:
        raise ValueError(f"label must be 1..{MAX_LABEL} characters, got {len(label)}")
    if not configs:
        raise ValueError("no M entries to import")
    rejected = dict(cannot_launch or {})
    if rejected and checked_arch is None:
        raise ValueError("cannot_launch needs the checked_arch it was found for")
    if set(rejected) - set(configs):
        raise ValueError(
            f"cannot_launch names M not in the file: "
            f"{', '.join(map(str, sorted(set(rejected) - set(configs))))}"
        )
    return rejected


def list_imports(session: Session, *, device_name: str | None = None) -> list[ImportInfo]:
    """Imported files, of one device or all.

    Args:
        session: the open session.
        device_name: only this device; None for all.

    Returns:
        Sorted by (device_name, N, K, block_shape, family, shape_params, label); a file
        without block scales before those with.
    """
    query = select(ImportedFile, Device.device_name).join(
        Device, ImportedFile.device_id == Device.device_id
    )
    if device_name is not None:
        query = query.where(Device.device_name == device_name)
    rows = [_info(row, name) for row, name in session.execute(query)]
    return sorted(
        rows,
        key=lambda i: (
            i.device_name,
            i.N,
            i.K,
            block_columns(i.block_shape),
            i.family,
            i.shape_params,
            i.label,
        ),
    )


def list_import_device_names(session: Session) -> list[str]:
    """The device_name keys that have at least one import.

    Args:
        session: the open session.

    Returns:
        The names, sorted.
    """
    names = session.scalars(
        select(Device.device_name)
        .where(
            select(ImportedFile.import_id)
            .where(ImportedFile.device_id == Device.device_id)
            .exists()
        )
        .order_by(Device.device_name)
    )
    return list(names)


def imported_configs(session: Session, *, device_name: str) -> dict[ImportKey, ImportedShape]:
    """Per shape of a device (`ImportKey`: family, shape_params, N, K, block_shape), the
    imported entries a merge of that shape can fall back on: one family's files are never
    taken for another's, nor a file of one E for a file of another.

    Where several imports carry an M, the latest import (by created_at, then import_id) wins,
    among the entries that can launch: an entry the launch check found cannot launch on the
    device is never used, and is listed in `left_out` with its label and reason.

    Args:
        session: the open session.
        device_name: vLLM's device key.

    Returns:
        (family, shape_params, N, K, block_shape) -> entries and the label of each.
    """
    merged: dict[ImportKey, ImportedShape] = {}
    ordered = sorted(
        list_imports(session, device_name=device_name),
        key=lambda i: (i.created_at, i.import_id),
    )
    for item in ordered:
        key = (item.family, item.shape_params, item.N, item.K, item.block_shape)
        shape = merged.setdefault(key, ImportedShape({}, {}))
        for M, entry in item.configs.items():
            if M in item.cannot_launch:
                shape.left_out[M] = (item.label, item.cannot_launch[M])
                continue
            shape.configs[M] = entry
            shape.labels[M] = item.label
    return merged
