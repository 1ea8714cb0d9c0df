"""Merge the store's winners into vLLM config files: the no-regression rule, each entry's notes,
coverage, atomic writes."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from tuner.core import REQUIRED_M
from tuner.files.format import dump_config_file, vllm_pick_key
from tuner.files.provenance import release_of
from tuner.kernels.config import KernelConfig
from tuner.kernels.registry import DEFAULT_FAMILY, get_family
from tuner.kernels.shape import FamilyShape, Shape, ShapeKeyed, as_block_shape

if TYPE_CHECKING:  # the store's rows; the merge itself imports no SQL
    from db.repo import ImportedShape, ShapeCoverage, WinnerRow

Entries = TypeVar("Entries")


class PartialFileError(ValueError):
    """A shape's M grid has M values without a winner, and a partial file was not asked for."""


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


def runs_note(winner: WinnerRow) -> str | None:
    """Which sweep's winner stands when several sweeps tuned one (shape, M), or None for one.
    A winner without `other_sweeps`, `decided` or `spread_us` has WinnerRow's defaults."""
    others = tuple(getattr(winner, "other_sweeps", ()))
    if not others:
        return None
    how = "decided last" if getattr(winner, "decided", False) else "the newest sweep"
    also = f"sweep {others[0]}" if len(others) == 1 else f"sweeps {', '.join(map(str, others))}"
    return (
        f"M={winner.M}: sweep {winner.sweep_id}'s winner ({how}) stands; "
        f"{also} also tuned it, not compared by latency (another run)"
    )


def _default_note(winner: WinnerRow) -> str:
    """Why the default config is in the file when it is the winner itself. A decision
    (tuner.measure.noise.decide_winner) keeps it when no config beat it by more than the
    spread, which is all a winner row can tell."""
    if not getattr(winner, "decided", False):
        return f"M={winner.M}: the default config was fastest"
    spread_us = getattr(winner, "spread_us", None)
    noise = "" if spread_us is None else f" (spread {spread_us:.2f} us)"
    return (
        f"M={winner.M}: default config kept after interleaved re-timing: no config beat it "
        f"by more than the noise{noise}"
    )


def _winner_entry(
    winner: WinnerRow, default_at: Callable[[int], KernelConfig]
) -> tuple[dict, list[str]]:
    """The entry a winner puts in the file (the default config when it is not faster)."""
    M = winner.M
    notes = [note] if (note := runs_note(winner)) else []
    if winner.is_default:
        return default_at(M).as_dict(), [*notes, _default_note(winner)]
    if winner.default_latency_us is None:
        return dict(winner.config), [
            *notes,
            f"M={M}: no default-config baseline measured; winner kept unchecked",
        ]
    if winner.latency_us >= winner.default_latency_us:
        shown = KernelConfig.from_dict(winner.config).short()
        return default_at(M).as_dict(), [
            *notes,
            f"M={M}: best config {shown} ({winner.latency_us:.2f} us) is not faster than the "
            f"default ({winner.default_latency_us:.2f} us); emitting the default config",
        ]
    return dict(winner.config), notes


def _entries(
    by_m: Mapping[int, WinnerRow],
    default_at: Callable[[int], KernelConfig],
    existing: ImportedShape | None,
) -> tuple[dict[int, dict[str, int]], list[str]]:
    """The file's entries (each winner over an existing entry) and their notes, in M order: the
    winners', then those of existing entries kept or left out without a measurement."""
    configs = {M: dict(entry) for M, entry in (existing.configs if existing else {}).items()}
    labels = dict(existing.labels) if existing else {}
    notes: list[str] = []
    for M in sorted(by_m):
        if M in configs:
            notes.append(f"M={M}: measured winner replaces the entry imported from '{labels[M]}'")
        configs[M], winner_notes = _winner_entry(by_m[M], default_at)
        notes += winner_notes
    notes += [
        f"M={M}: imported from '{labels[M]}', not measured here (no comparison with the default)"
        for M in sorted(configs)
        if M not in by_m
    ]
    notes += [
        f"M={M}: entry imported from '{label}' left out, it cannot launch on this device: {why}"
        for M, (label, why) in sorted(getattr(existing, "left_out", {}).items())
    ]
    return configs, notes


def merge_shape(
    winners: Sequence[WinnerRow],
    *,
    m_requested: Sequence[int],
    default: KernelConfig | Callable[[int], KernelConfig],
    existing: ImportedShape | None = None,
    allow_partial: bool = False,
    triton_version: str | None = None,
) -> MergedFile:
    """Merge one shape's winners (at most one per M) into a file vLLM reads by nearest M.

    A winner not faster than the default config for its M (equal median included) is replaced
    by the default, with a note. `existing` entries (an import's configs, labels, left_out)
    fill M without a winner; never measured here, they never count as tuned. `default`: vLLM's
    default config, or M -> it; `triton_version` is written into the file.

    Raises:
        PartialFileError: M of `m_requested` without a winner and not `allow_partial`, or
            nothing at all to write.
        ValueError: two winners for one M, or an entry vLLM could not read.
    """
    by_m: dict[int, WinnerRow] = {}
    for winner in winners:
        if winner.M in by_m:
            raise ValueError(f"two winners for M={winner.M}")
        by_m[winner.M] = winner
    configs, notes = _entries(by_m, default if callable(default) else lambda M: default, existing)
    m_imported = [M for M in sorted(configs) if M not in by_m]
    m_missing = sorted({M for M in m_requested if M not in by_m})
    if not configs:
        raise PartialFileError("no M has a winner: nothing to write")
    if m_missing and not allow_partial:
        raise PartialFileError(f"no winner yet for M={', '.join(map(str, m_missing))}")
    warnings = [
        f"M={M} is not in the file: vLLM will use the M={vllm_pick_key(configs, M)} entry"
        for M in REQUIRED_M
        if M not in configs
    ]
    text = dump_config_file(configs, triton_version)
    sha256 = hashlib.sha256(text.encode()).hexdigest()
    return MergedFile(
        dict(sorted(configs.items())),
        text,
        sha256,
        notes,
        warnings,
        m_missing,
        bool(m_missing),
        m_imported,
    )


@dataclass(frozen=True)
class DeviceFile(ShapeKeyed):
    """One merged file of a device, named as the engine looks it up; `key` says which kernel
    family's file it is and of what shape."""

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
    """Imported entries keyed by the shape whose file they fill: each of `keys` of the import's
    family whose file vLLM reads under the import's name (a fused-MoE name has E and N, not K or
    top_k); an import no key matches keeps its own key (a file of imported entries only)."""
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
    winners: Sequence[WinnerRow],
    coverage: Sequence[ShapeCoverage],
    *,
    allow_partial: bool = False,
    imported: Mapping[FamilyShape, ImportedShape] | None = None,
    device_name: str | None = None,
    engine: str = "vllm",
    triton_of: Mapping[int, str] | None = None,
    file_device: str | None = None,
) -> DeviceFiles:
    """Merge a device's winners into one file per `FamilyShape` (named in `engine`'s spelling
    with `file_device`, `engine_device_name`, else the key); imported entries (`import_targets`)
    fill the M without a winner. `triton_of`: environment_id -> the Triton written into files
    of families that record it. `device_name` is needed only without winners.

    Raises:
        ValueError: winners of several devices, none and no `device_name`, or two winners for
            one (shape, M).
    """
    devices = sorted({row.device_name for row in winners} | {device_name or ""} - {""})
    if len(devices) != 1:
        raise ValueError(f"winners of several devices: {', '.join(devices) or 'none'}")
    named = file_device or devices[0]
    grouped: dict[FamilyShape, list[WinnerRow]] = {}
    for row in winners:
        grouped.setdefault(FamilyShape.of_row(row), []).append(row)
    requested = {FamilyShape.of_row(row): list(row.m_requested) for row in coverage}
    imports = import_targets(set(grouped) | set(requested), imported or {}, devices[0])
    files, skipped = [], []
    for key in sorted(set(grouped) | set(requested) | set(imports)):
        rows, m_requested = grouped.get(key, []), requested.get(key, [])
        try:
            merged = _merge_key(
                key, rows, m_requested, imports.get(key), allow_partial, engine, triton_of
            )
        except PartialFileError as exc:
            done = {row.M for row in rows}
            skipped.append(SkippedShape(key, str(exc), sorted(set(m_requested) - done)))
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


def _merge_key(
    key: FamilyShape,
    rows: Sequence[WinnerRow],
    m_requested: Sequence[int],
    existing: ImportedShape | None,
    allow_partial: bool,
    engine: str,
    triton_of: Mapping[int, str] | None,
) -> MergedFile:
    """`merge_shape` of one family's shape, defaulted by the family, with the Triton version
    where the family records it (vLLM only: SGLang's get_moe_configs turns every key into an
    int)."""
    family = get_family(key.family)
    record = family.files.file_triton_version and engine == "vllm"
    return merge_shape(
        rows,
        m_requested=m_requested,
        default=lambda M: family.default_config(key.shape, M),
        existing=existing,
        allow_partial=allow_partial,
        triton_version=_file_triton(rows, triton_of or {}) if record else None,
    )


def _file_triton(rows: Sequence[WinnerRow], triton_of: Mapping[int, str]) -> str | None:
    """The Triton most of `rows` were timed with (the newer on a tie); None when unknown."""
    timed = [getattr(row, "environment_id", None) for row in rows]
    counts = Counter(triton_of[e] for e in timed if e is not None and e in triton_of)
    return max(counts, key=lambda v: (counts[v], release_of(v))) if counts else None


def write_atomically(folder: Path, contents: Mapping[str, bytes]) -> list[Path]:
    """Write every file (name -> bytes) to a temporary file in `folder` (created), then rename
    them all into place: a reader sees each file whole, old or new. Files are 0644, as a
    read-only mount needs.

    Returns:
        The written paths, in the order of `contents`.
    """
    folder.mkdir(parents=True, exist_ok=True)
    temporary: list[str] = []
    try:
        for body in contents.values():
            fd, temp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".json")
            temporary.append(temp)
            with os.fdopen(fd, "wb") as handle:
                handle.write(body)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(temp, 0o644)
    except BaseException:
        for temp in temporary:
            Path(temp).unlink(missing_ok=True)
        raise
    for temp, name in zip(temporary, contents, strict=True):
        os.replace(temp, folder / name)
    return [folder / name for name in contents]


def write_files_atomically(files: Iterable[DeviceFile], out_dir: Path) -> list[Path]:
    """`write_atomically` of merged files, under their names."""
    return write_atomically(out_dir, {f.file_name: f.merged.text.encode() for f in files})
