"""`tuner import`: keep existing config files (files or a folder such as vLLM's configs folder)
as a labelled source per device and shape."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from tuner.cli.options import DbOpt, fail, open_db, plain
from tuner.files.format import ParsedFile


@dataclass(frozen=True)
class Planned:
    """A file to store: where it was read, what it holds, the device it is stored for."""

    path: Path
    item: ParsedFile
    target: str


def _expand(paths: list[Path]) -> tuple[list[Path], list[tuple[Path, str]]]:
    """Files given, and the config files of folders given; what the folders hold besides."""
    from tuner.files.imports import list_config_folder

    files: list[Path] = []
    skipped: list[tuple[Path, str]] = []
    for path in paths:
        if not path.is_dir():
            files.append(path)
            continue
        try:
            listing = list_config_folder(path)
        except OSError as exc:
            raise fail(f"{path}: cannot list: {exc.strerror or exc}") from None
        if not listing.files:
            raise fail(f"{path}: no fp8_w8a8 config files in this folder (names like "
                       "N=...,K=...,device_name=...,dtype=fp8_w8a8,block_shape=[128,128].json)")
        files.extend(listing.files)
        skipped.extend(listing.skipped)
    return files, skipped


def _parse(files: list[Path]) -> list[tuple[Path, ParsedFile]]:
    from tuner.files.format import MAX_FILE_BYTES, parse_file_for_import

    parsed = []
    for path in files:
        try:
            if path.stat().st_size > MAX_FILE_BYTES:
                raise ValueError(f"{path}: more than {MAX_FILE_BYTES} bytes: not a config file")
            parsed.append((path, parse_file_for_import(path.name, path.read_bytes(), str(path))))
        except OSError as exc:
            raise fail(f"{path}: cannot read: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise fail(str(exc)) from None
    return parsed


def _plan(parsed: list[tuple[Path, ParsedFile]], device: str | None,
          known: list[str]) -> tuple[list[Planned], list[tuple[Path, str]]]:
    """One file per (device, shape): of two spellings of one file, the one vLLM reads."""
    from tuner.files.imports import never_read_by_vllm, target_device

    planned: dict[tuple[str, int, int, tuple[int, int]], Planned] = {}
    skipped: list[tuple[Path, str]] = []
    for path, item in parsed:
        try:
            target = target_device(device, item.name.device_name, known)
        except LookupError as exc:
            raise fail(f"{path}: {exc}") from None
        key = (target, item.name.N, item.name.K, item.name.block_shape)
        here = Planned(path, item, target)
        other = planned.get(key)
        if other is None:
            planned[key] = here
            continue
        unread = never_read_by_vllm(other.path.name, path.name)
        if unread is None:
            raise fail(f"{path}: same device and shape as {other.path}; import one per shape "
                       "and label")
        kept, dropped = (here, other) if unread == other.path.name else (other, here)
        planned[key] = kept
        skipped.append((dropped.path, f"vLLM never reads this name (SGLang's spelling); "
                                      f"imported {kept.path.name}, the name vLLM reads"))
    return list(planned.values()), skipped


def import_files(
    files: Annotated[list[Path], typer.Argument(help="Config files, e.g. those shipped with "
                                                "vLLM (NVIDIA or AMD), or folders of them "
                                                "(e.g. vLLM's configs folder).")],
    label: Annotated[str, typer.Option(help="Where the files come from, e.g. vllm-0.33.0; "
                                       "importing a label again replaces its entries.")
                     ] = "imported",
    device: Annotated[str | None, typer.Option(help="Store for this device (one in the store, "
                                               "aliases allowed) [default: the file name's "
                                               "device_name].")] = None,
    db: DbOpt = None,
) -> None:
    """Keep existing config files as a labelled source per device and shape.

    Their entries fill M without a measured winner at export (measured winners beat them);
    they are never measured and never claimed to beat the default. Every file is checked
    before anything is stored: one bad file stores none. A folder's other entries (README,
    other kernels' or dtypes' files, subfolders) are skipped with one line each; of a file
    there in vLLM's and SGLang's spelling, the one vLLM reads is imported.
    """
    from db import repo
    from db.engine import session_scope
    from tuner.files.format import coverage_summary

    if not 1 <= len(label) <= 128 or not label.strip():
        raise fail("--label must be 1..128 characters")
    paths, skipped = _expand(files)
    parsed = _parse(paths)
    _, engine = open_db(db)
    with session_scope(engine) as session:
        known = sorted(set(repo.list_device_names(session))
                       | set(repo.list_import_device_names(session)))
    planned, unread = _plan(parsed, device, known)
    with session_scope(engine) as session:
        for plan in planned:
            item = plan.item
            repo.record_import(session, device_name=plan.target, N=item.name.N, K=item.name.K,
                               block_shape=item.name.block_shape, label=label,
                               file_name=plan.path.name, sha256=item.sha256,
                               configs=item.configs)
    for plan in planned:
        moved = "" if plan.target == plan.item.name.device_name else f" (file named for " \
            f"{plan.item.name.device_name})"
        plain(f"imported {plan.path.name} for {plan.target}{moved} as '{label}': "
              f"{coverage_summary(plan.item.configs)}")
    for path, reason in [*unread, *skipped]:
        plain(f"skipped {path.name}: {reason}")
