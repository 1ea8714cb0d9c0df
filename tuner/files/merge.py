"""Merge the store's winners into vLLM config files: no-regression rule, coverage, atomic writes."""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar

from tuner.core import REQUIRED_M
from tuner.files.format import dump_config_file, vllm_pick_key
from tuner.files.merge_notes import WinnerLike, unmeasured_notes, winner_entry
from tuner.kernels.config import KernelConfig
from tuner.kernels.registry import DEFAULT_FAMILY, get_family
from tuner.kernels.shape import FamilyShape, Shape, ShapeKeyed, as_block_shape

Entries = TypeVar("Entries")


class PartialFileError(ValueError):
    """A shape's M grid has M values without a winner, and a partial file was not asked for."""


class WinnerRowLike(WinnerLike, Protocol):
    """A winner that also names its device and shape (db.repo.WinnerRow)."""

    @property
    def device_name(self) -> str: ...

    @property
    def N(self) -> int: ...

    @property
    def K(self) -> int: ...

    @property
    def block_shape(self) -> Sequence[int] | None: ...


class ImportedShapeLike(Protocol):
    """Imported entries of one shape (db.repo.ImportedShape): M -> config, M -> label. It may
    also carry `left_out` (M -> (label, reason)): entries the launch check left out."""

    @property
    def configs(self) -> Mapping[int, Mapping[str, int]]: ...

    @property
    def labels(self) -> Mapping[int, str]: ...


class ShapeCoverageLike(Protocol):
    """The M grid requested for a shape (db.repo.ShapeCoverage)."""

    @property
    def N(self) -> int: ...

    @property
    def K(self) -> int: ...

    @property
    def block_shape(self) -> Sequence[int] | None: ...

    @property
    def m_requested(self) -> Sequence[int]: ...


@dataclass(frozen=True)
class MergedFile:
    """One shape's merged file: its configs, exact text, hash and what the merge decided."""

    configs: dict[int, dict[str, int]]
    text: str
    sha256: str
    notes: list[str]
    warnings: list[str]
    m_missing: list[int]
    partial: bool
    m_imported: list[int] = field(default_factory=list)


def _winners_by_m(winners: Sequence[WinnerLike]) -> dict[int, WinnerLike]:
    """M -> its winner; ValueError on two winners for one M."""
    by_m: dict[int, WinnerLike] = {}
    for winner in winners:
        if winner.M in by_m:
            raise ValueError(f"two winners for M={winner.M}")
        by_m[winner.M] = winner
    return by_m


def merge_shape(
    winners: Sequence[WinnerLike],
    *,
    m_requested: Sequence[int],
    default: KernelConfig | Callable[[int], KernelConfig],
    existing: Mapping[int, Mapping[str, int]] | None = None,
    allow_partial: bool = False,
    existing_labels: Mapping[int, str] | None = None,
    left_out: Mapping[int, tuple[str, str]] | None = None,
    triton_version: str | None = None,
) -> MergedFile:
    """Merge one shape's winners into a file that vLLM reads with its nearest-M lookup.

    A winner not faster than the default config for its M (equal median included: no measured
    gain) is replaced by the default, with a note. A winner that stands over other sweeps' (see
    `db.views`) says so (`runs_note`). A winner that is the default config gets a
    note too: "was fastest" for a trial, or, for a decided winner (`decided_spread`), that no
    config beat it by more than the re-timing's spread. `existing` entries fill M without a winner;
    they were not measured here, so their notes say where they came from and claim nothing about
    the default. They do not count as tuned: a grid M with only an existing entry is missing.

    Args:
        winners: At most one per M.
        m_requested: The sweep's M grid for this shape.
        default: vLLM's default config for the shape, or M -> the default at M (a family
            whose default depends on M).
        existing: Entries of a file to merge in (for example one shipped with vLLM).
        allow_partial: Emit a file even if some requested M has no winner.
        existing_labels: M -> the label of the import an existing entry came from.
        left_out: M -> (label, reason) of imported entries that cannot launch on the device
            (`tuner import`'s launch check); they are not in `existing`, and get a note each.
        triton_version: the Triton the winners were timed with, written into the file
            (`dump_config_file`); None for none.

    Raises:
        PartialFileError: Some M of `m_requested` has no winner and `allow_partial` is false,
            or there is nothing at all to write.
        ValueError: Two winners for one M, or an entry vLLM could not read.
    """
    configs = {M: dict(entry) for M, entry in (existing or {}).items()}
    labels = dict(existing_labels or {})
    by_m = _winners_by_m(winners)
    notes = _put_winners(configs, by_m, labels, default if callable(default) else lambda M: default)
    m_imported = [M for M in sorted(configs) if M not in by_m]
    notes.extend(unmeasured_notes(m_imported, labels, left_out or {}))
    m_missing = sorted({M for M in m_requested if M not in by_m})
    _check_complete(configs, m_missing, allow_partial)
    warnings = _lookup_warnings(configs)
    text = dump_config_file(configs, triton_version)
    return MergedFile(
        configs={M: configs[M] for M in sorted(configs)},
        text=text,
        sha256=hashlib.sha256(text.encode()).hexdigest(),
        notes=notes,
        warnings=warnings,
        m_missing=m_missing,
        partial=bool(m_missing),
        m_imported=m_imported,
    )


def _put_winners(
    configs: dict[int, dict[str, int]],
    by_m: Mapping[int, WinnerLike],
    labels: Mapping[int, str],
    default_at: Callable[[int], KernelConfig],
) -> list[str]:
    """Put each winner's entry (`winner_entry`) in `configs`, over an existing one; the notes,
    in M order."""
    notes: list[str] = []
    for M in sorted(by_m):
        if M in configs:
            origin = (
                f"the entry imported from '{labels[M]}'" if M in labels else "the existing entry"
            )
            notes.append(f"M={M}: measured winner replaces {origin}")
        configs[M], winner_notes = winner_entry(by_m[M], default_at)
        notes.extend(winner_notes)
    return notes


def _check_complete(
    configs: Mapping[int, object], m_missing: Sequence[int], allow_partial: bool
) -> None:
    """Raise PartialFileError when there is nothing to write, or M without a winner that
    `allow_partial` does not allow."""
    if not configs:
        raise PartialFileError("no M has a winner: nothing to write")
    if m_missing and not allow_partial:
        raise PartialFileError(f"no winner yet for M={', '.join(map(str, m_missing))}")


def _lookup_warnings(configs: Mapping[int, Mapping[str, int]]) -> list[str]:
    """For each M vLLM always looks up (`REQUIRED_M`) that the file lacks, the entry it uses."""
    return [
        f"M={M} is not in the file: vLLM will use the M={vllm_pick_key(configs, M)} entry"
        for M in REQUIRED_M
        if M not in configs
    ]


@dataclass(frozen=True)
class DeviceFile(ShapeKeyed):
    """One merged file of a device, named as vLLM looks it up; `key` says which kernel
    family's file it is (`tuner.kernels.registry`) and of what shape."""

    file_name: str
    key: FamilyShape
    merged: MergedFile


@dataclass(frozen=True)
class SkippedShape(ShapeKeyed):
    """A shape with no file, and why."""

    key: FamilyShape
    reason: str
    m_missing: list[int]


@dataclass(frozen=True)
class DeviceFiles:
    """All files of a device, the shapes left out, and one line per imported entry left out
    because it cannot launch on the device (`tuner import`'s launch check)."""

    files: list[DeviceFile]
    skipped: list[SkippedShape]
    left_out: list[str] = field(default_factory=list)


def entries_left_out(count: int) -> str:
    """ "1 entry left out", "2 entries left out"."""
    return f"{count} entr{'y' if count == 1 else 'ies'} left out"


def dense_key(N: int, K: int, block_shape: Sequence[int] | None) -> FamilyShape:
    """The key of the dense GEMM's file of (N, K, block_shape)."""
    return FamilyShape(DEFAULT_FAMILY, Shape(N, K, as_block_shape(block_shape)))


def import_targets(
    keys: Iterable[FamilyShape], imported: Mapping[FamilyShape, Entries], device_name: str
) -> dict[FamilyShape, Entries]:
    """Imported entries keyed by the shape whose file they fill.

    An import's key is the shape its file's name says (`tuner.files.format.parse_import_name`),
    which may carry fewer dimensions than a swept shape: a fused-MoE name has E and N, not K
    or top_k. Its entries fill each of `keys` of the same family whose file vLLM reads under
    the same name (`FamilyFiles.file_name`); an import no such key matches keeps its own key
    (a file of imported entries only). Files of another family, or another E, never match.

    Args:
        keys: the shapes with winners or a requested M grid.
        imported: import key (family and the shape of its file's name) -> its entries.
        device_name: the device the files are named for.

    Returns:
        Shape key -> the imported entries of its file.
    """
    by_name: dict[tuple[str, str], list[FamilyShape]] = {}
    for key in keys:
        name = get_family(key.family).files.file_name(key.shape, device_name, "vllm")
        by_name.setdefault((key.family, name), []).append(key)
    targets: dict[FamilyShape, Entries] = {}
    for key, entries in imported.items():
        name = get_family(key.family).files.file_name(key.shape, device_name, "vllm")
        for target in by_name.get((key.family, name), [key]):
            targets[target] = entries
    return targets


def build_device_files(
    winners: Sequence[WinnerRowLike],
    coverage: Sequence[ShapeCoverageLike],
    *,
    allow_partial: bool = False,
    imported: Mapping[FamilyShape, ImportedShapeLike] | None = None,
    device_name: str | None = None,
    engine: str = "vllm",
    triton_of: Mapping[int, str] | None = None,
    file_device: str | None = None,
) -> DeviceFiles:
    """Merge a device's winners into one file per `FamilyShape`, named and defaulted by its
    kernel family; imported entries fill the M without a winner (a shape with imported entries
    only gets a file of them, each noted "imported from <label>, not measured here").

    Args:
        winners: one per (N, K, block_shape, M); coverage: the requested M grid of each shape.
        allow_partial: emit files for shapes with missing M instead of skipping them.
        imported: an import's key (family, the shape its file's name says) -> its entries and
            labels (db.repo); each fills the file of the same family and name (`import_targets`).
        device_name: the device's key; needed only when `winners` is empty.
        engine: file-name spelling, "vllm" or "sglang".
        triton_of: environment_id -> Triton version, written into the files of families that
            record it (the version most of a file's winners were timed with; never for SGLang).
        file_device: the engine's device part of the names (`engine_device_name`); None: the key.

    Raises:
        ValueError: winners of several devices (or another than `device_name`), two winners
            for one (shape, M), no device name at all, or an unknown engine.
    """
    device = _one_device(winners, device_name)
    named = file_device or device
    grouped: dict[FamilyShape, list[WinnerRowLike]] = {}
    for row in winners:
        grouped.setdefault(FamilyShape.of_row(row), []).append(row)
    requested = {FamilyShape.of_row(row): list(row.m_requested) for row in coverage}
    imports = import_targets(set(grouped) | set(requested), imported or {}, device)
    files: list[DeviceFile] = []
    skipped: list[SkippedShape] = []
    for key in sorted(set(grouped) | set(requested) | set(imports)):
        m_requested = requested.get(key, [])
        rows = grouped.get(key, [])
        try:
            merged = _merge_key(
                key, rows, m_requested, imports.get(key), allow_partial, engine, triton_of
            )
        except PartialFileError as exc:
            done = {row.M for row in rows}
            missing = sorted({M for M in m_requested if M not in done})
            skipped.append(SkippedShape(key, str(exc), missing))
            continue
        name = get_family(key.family).files.file_name(key.shape, named, engine)
        files.append(DeviceFile(name, key, merged))
    left_out = [
        f"left out {get_family(key.family).files.file_name(key.shape, named, engine)} M={M} "
        f"(imported from '{label}'): {reason}"
        for key in sorted(imports)
        for M, (label, reason) in sorted(getattr(imports[key], "left_out", {}).items())
    ]
    return DeviceFiles(files=files, skipped=skipped, left_out=list(dict.fromkeys(left_out)))


def _one_device(winners: Sequence[WinnerRowLike], device_name: str | None) -> str:
    """The one device of the winners and `device_name`; ValueError for several or none."""
    named = {row.device_name for row in winners}
    devices = sorted(named if device_name is None else named | {device_name})
    if len(devices) != 1:
        raise ValueError(
            f"winners of several devices: {', '.join(devices)}"
            if devices
            else "no winners and no device_name"
        )
    return devices[0]


def _merge_key(
    key: FamilyShape,
    rows: Sequence[WinnerRowLike],
    m_requested: Sequence[int],
    extra: ImportedShapeLike | None,
    allow_partial: bool,
    engine: str,
    triton_of: Mapping[int, str] | None,
) -> MergedFile:
    """`merge_shape` of one family's shape: its winners over its imported entries, defaulted
    by the family, with the Triton version when the family records it (vLLM only)."""
    family, shape = get_family(key.family), key.shape
    return merge_shape(
        rows,
        m_requested=m_requested,
        default=lambda M: family.default_config(shape, M),
        allow_partial=allow_partial,
        existing=extra.configs if extra else None,
        existing_labels=extra.labels if extra else None,
        left_out=getattr(extra, "left_out", None),
        # SGLang's get_moe_configs turns every key into an int (0.5.23,
        # fused_moe_triton_config.py): a "triton_version" key would make it raise.
        triton_version=_file_triton(rows, triton_of)
        if family.files.file_triton_version and engine == "vllm"
        else None,
    )


def _file_triton(rows: Sequence[WinnerRowLike], triton_of: Mapping[int, str] | None) -> str | None:
    """The Triton most of `rows` were timed with (the newer on a tie); None when unknown."""
    environments = (getattr(row, "environment_id", None) for row in rows)
    counts = Counter(
        triton_of[e] for e in environments if triton_of and isinstance(e, int) and e in triton_of
    )
    if not counts:
        return None
    return max(counts, key=lambda v: (counts[v], [int(p) for p in re.findall(r"\d+", v)]))


def write_files_atomically(files: Iterable[DeviceFile], out_dir: Path) -> list[Path]:
    """Write each file to a temporary file in `out_dir`, then rename it into place.

    A reader (vLLM starting in a container) sees the old file or the new one, never half of one.
    Files are made world-readable (0644), as a read-only mount into a container needs.

    Args:
        files: The files to write.
        out_dir: The folder, created if absent.

    Returns:
        The written paths, in the order of `files`.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for device_file in files:
        target = out_dir / device_file.file_name
        fd, tmp_name = tempfile.mkstemp(dir=out_dir, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(device_file.merged.text.encode())
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(tmp_name, 0o644)
            os.replace(tmp_name, target)
        except BaseException:
            Path(tmp_name).unlink(missing_ok=True)
            raise
        written.append(target)
    return written
