"""Imports of config files: which device a file is stored for (shared by `tuner import` and the
API), which entries of a folder are config files, and which of two spellings vLLM reads."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tuner.core import FP8_DTYPE
from tuner.files.format import parse_import_name
from tuner.files.merge import entries_left_out
from tuner.inputs.devices import resolve_device
from tuner.kernels.registry import get_family


def target_device(requested: str | None, file_device: str, known: Sequence[str]) -> str:
    """The device an import is stored for: the file name's device, or the one of the store's
    devices and the file's own that `requested` names (`resolve_device`), so that a typo never
    creates a device.

    Raises:
        LookupError: the request names neither a known device nor the file's device.
    """
    if requested is None:
        return file_device
    try:
        return resolve_device(requested, known=[*known, file_device])[0].device_name
    except ValueError:
        raise LookupError(
            f"device {requested!r} is neither in the store (known: "
            f"{', '.join(sorted(known)) or '(none)'}) nor the file's device {file_device!r}"
        ) from None


# Why an entry of a folder is not imported (one line each; the batch goes on without it).
SKIP_FOLDER = "a folder (folders inside the folder are not read)"
SKIP_NOT_FILE = "not a regular file"
SKIP_NOT_CONFIG = "not a block-FP8 GEMM config file name"


@dataclass(frozen=True)
class FolderListing:
    """What a folder given to `tuner import` holds.

    Attributes:
        files: the fp8_w8a8 config files, by name.
        skipped: (entry, why it is not imported) for everything else, by name.
    """

    files: list[Path]
    skipped: list[tuple[Path, str]]


def list_config_folder(folder: Path) -> FolderListing:
    """Sort a folder's entries (not its subfolders') into config files to import and the rest.

    A folder laid out like vLLM's configs folder also holds a README, `__init__.py`, files no
    registered family names (`tuner.files.format.parse_import_name`; a fused-MoE block-FP8
    `E=...` file is one of a family's, imported with its E) and int8_w8a8 files; those are
    skipped, not errors.
    A file named like a config file is not read here: a bad body still fails the import.

    Args:
        folder: the folder.

    Returns:
        The fp8_w8a8 config files and the skipped entries with their reasons.

    Raises:
        OSError: the folder cannot be listed.
    """
    files: list[Path] = []
    skipped: list[tuple[Path, str]] = []
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        if entry.is_dir():
            skipped.append((entry, SKIP_FOLDER))
            continue
        if not entry.is_file():
            skipped.append((entry, SKIP_NOT_FILE))
            continue
        try:
            _, name = parse_import_name(entry.name)
        except ValueError:
            skipped.append((entry, SKIP_NOT_CONFIG))
            continue
        if name.dtype != FP8_DTYPE:
            skipped.append((entry, f"dtype {name.dtype}: only {FP8_DTYPE} configs are kept"))
            continue
        files.append(entry)
    return FolderListing(files, skipped)


def never_read_by_vllm(first: str, second: str) -> str | None:
    """Of two names of one file, the one vLLM never reads, when they differ only in spelling.

    vLLM looks up `block_shape=[128,128]` (`config_file_name`); SGLang writes and reads
    `block_shape=[128, 128]` (`tuner.kernels.engines.ENGINES`). A folder may hold both for
    one device and shape; vLLM reads only the first. Each name's kernel family
    (`parse_import_name`) spells it for vLLM (`KernelFamily.respell`).

    Args:
        first: a config file name.
        second: another config file name.

    Returns:
        The name in SGLang's spelling when the other is the same file in vLLM's; else None
        (two different files, or two names vLLM reads neither or both of).

    Raises:
        ValueError: a name that is not a config file name.
    """
    (family_first, parsed_first), (family_second, parsed_second) = (
        parse_import_name(first),
        parse_import_name(second),
    )
    if first == second or (family_first, parsed_first) != (family_second, parsed_second):
        return None
    vllm_name = get_family(family_first).respell(first, "vllm")
    if first == vllm_name:
        return second
    if second == vllm_name:
        return first
    return None


def imported_files_summary(imports: Sequence) -> str:
    """What a device's imported files are, for the lines that say it has nothing else: "2
    file(s) from 'a', 'b'; 1 entry left out, cannot launch there" (the part on entries only
    when some were left out by the launch check).

    Args:
        imports: its imported files (`db.repo.list_imports`: `label`, `cannot_launch`).
    """
    labels = ", ".join(repr(label) for label in sorted({i.label for i in imports}))
    left_out = sum(len(i.cannot_launch) for i in imports)
    dropped = f"; {entries_left_out(left_out)}, cannot launch there" if left_out else ""
    return f"{len(imports)} file(s) from {labels}{dropped}"
