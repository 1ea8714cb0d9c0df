"""`tuner import`: keep existing config files (files or a folder such as vLLM's configs folder)
as a labelled source per device and shape, leaving out entries that cannot launch on the device
(compiled for its architecture here, without a GPU; the verdict is stored with the entries)."""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tuner.cli.engines import clamp_lines
from tuner.cli.errors import fail
from tuner.cli.options import DbOpt
from tuner.cli.output import plain
from tuner.cli.publish import NoPublishOpt, publish_device
from tuner.cli.store import open_db

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor

    from sqlalchemy.engine import Engine

    from tuner.files.format import ParsedFile
    from tuner.measure.launch_check import LaunchVerdict


@dataclass(frozen=True)
class Planned:
    """A file to store: where it was read, what it holds, the device it is stored for."""

    path: Path
    item: ParsedFile
    target: str


@dataclass(frozen=True)
class Verdict:
    """The launch check of one planned file: the architecture checked for (None: not checked)
    and the M whose entries cannot launch there, with the reasons."""

    arch: int | None = None
    cannot_launch: dict[int, str] = field(default_factory=dict)


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
            raise fail(
                f"{path}: no fp8_w8a8 config files in this folder (names like "
                "N=...,K=...,device_name=...,dtype=fp8_w8a8,block_shape=[128,128].json)"
            )
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


def clamp_lines_of(parsed: list[tuple[Path, ParsedFile]], engine_version: str | None) -> list[str]:
    """`warning: ...` for each file in SGLang's spelling whose entries SGLang rewrites on read
    (`tuner.files.engine_folders.sglang_clamp_lines`), on the platform of the device in its
    name (AMD_... runs on ROCm)."""
    lines = []
    for path, item in parsed:
        if path.name == item.vllm_name:  # vLLM's spelling: a file for vLLM
            continue
        lines += [
            f"warning: {line}"
            for line in clamp_lines(
                item.name.device_name, engine_version, [(path.name, item.configs)]
            )
        ]
    return lines


def _plan(
    parsed: list[tuple[Path, ParsedFile]], device: str | None, known: list[str]
) -> tuple[list[Planned], list[tuple[Path, str]]]:
    """One file per (device, shape): of two spellings of one file, the one vLLM reads."""
    from tuner.files.imports import never_read_by_vllm, target_device

    planned: dict[tuple[str, str, str, int, int, tuple[int, int] | None], Planned] = {}
    skipped: list[tuple[Path, str]] = []
    for path, item in parsed:
        try:
            target = target_device(device, item.name.device_name, known)
        except LookupError as exc:
            raise fail(f"{path}: {exc}") from None
        name = item.name
        key = (target, item.family, name.params_text, name.N, name.K, name.block_shape)
        here = Planned(path, item, target)
        other = planned.get(key)
        if other is None:
            planned[key] = here
            continue
        unread = never_read_by_vllm(other.path.name, path.name)
        if unread is None:
            raise fail(
                f"{path}: same device and shape as {other.path}; import one per shape and label"
            )
        kept, dropped = (here, other) if unread == other.path.name else (other, here)
        planned[key] = kept
        skipped.append(
            (
                dropped.path,
                f"vLLM never reads this name (SGLang's spelling); "
                f"imported {kept.path.name}, the name vLLM reads",
            )
        )
    return list(planned.values()), skipped


def _check_device(
    target: str,
    plans: list[Planned],
    capabilities: list[str],
    verdicts: dict[Path, Verdict],
    lines: list[str],
    pool: ProcessPoolExecutor | None,
) -> None:
    """Compile a device's planned files for its architecture; record verdicts and lines."""
    from tuner.files.merge import entries_left_out
    from tuner.kernels.gpus import KNOWN_GPUS
    from tuner.measure.launch_check import device_arch

    found = device_arch(target, capabilities)
    if found is None:
        lines.append(
            f"not checked: {target} has no trials in the store and is not a known GPU "
            f"({', '.join(KNOWN_GPUS)}); its entries were imported unchecked"
        )
        return
    if found.shared_bytes is None:
        lines.append(
            f"not checked: no shared-memory limit known for sm{found.arch} "
            f"({found.source}); the entries of {target} were imported unchecked"
        )
        return
    left_out = configs = 0
    for plan in plans:
        verdict = _check_plan(plan, found.arch, target, pool, lines)
        if verdict is None:
            continue
        verdicts[plan.path] = Verdict(found.arch, verdict.cannot_launch)
        configs += verdict.configs
        left_out += len(verdict.cannot_launch)
    lines.append(
        f"checked the entries for {target} on sm{found.arch} ({found.source}; "
        f"{found.shared_bytes} bytes of shared memory per block): {configs} distinct "
        f"config(s) compiled, {entries_left_out(left_out)}"
    )


def _check_plan(
    plan: Planned, arch: int, target: str, pool: ProcessPoolExecutor | None, lines: list[str]
) -> LaunchVerdict | None:
    """One file's entries compiled for `arch`, a line for each left out or unchecked; None
    (and a line) when compiling failed."""
    from tuner.measure.launch_check import check_entries  # loads Triton's compiler

    item = plan.item
    try:
        verdict = check_entries(
            item.configs,
            arch=arch,
            device_name=target,
            N=item.name.N,
            K=item.name.K,
            block_shape=item.name.block_shape,
            pool=pool,
            family=item.family,
            params=item.name.params,
        )
    except Exception as exc:  # noqa: BLE001 - a broken compiler leaves the file unchecked
        text = " ".join(str(exc).split())[:200]
        lines.append(f"not checked {plan.path.name}: compiling failed: {text}")
        return None
    lines.extend(
        f"left out {plan.path.name} M={M}: {reason}; vLLM would fail with OutOfResources there"
        for M, reason in verdict.cannot_launch.items()
    )
    lines.extend(
        f"not checked {plan.path.name} M={M}: {why}" for M, why in verdict.unchecked.items()
    )
    return verdict


def _launch_checks(planned: list[Planned], store: Engine) -> tuple[dict[Path, Verdict], list[str]]:
    """Verdicts per file and the lines to print: each device's files compiled for its
    architecture, from its trials in the store or the table of known GPUs."""

    from db import repo
    from db.repo import session_scope
    from tuner.measure.compile import compile_pool

    by_target: dict[str, list[Planned]] = {}
    for plan in planned:
        by_target.setdefault(plan.target, []).append(plan)
    verdicts: dict[Path, Verdict] = {}
    lines: list[str] = []
    if importlib.util.find_spec("triton.backends.nvidia") is None:
        return verdicts, [
            "not checked: this Triton has no NVIDIA backend to compile with; "
            "the entries were imported unchecked"
        ]
    with session_scope(store) as session:
        capabilities = {
            target: [
                e.compute_capability for e in repo.device_environments(session, device_name=target)
            ]
            for target in by_target
        }
    pool = compile_pool(min(4, max(1, (os.cpu_count() or 2) - 1)))
    try:
        for target, plans in by_target.items():
            _check_device(target, plans, capabilities[target], verdicts, lines, pool)
    finally:
        pool.shutdown(cancel_futures=True)
    return verdicts, lines


FilesArg = Annotated[
    list[Path],
    typer.Argument(
        help="Config files, e.g. those shipped with "
        "vLLM (NVIDIA or AMD), or folders of them "
        "(e.g. vLLM's configs folder)."
    ),
]
LabelOpt = Annotated[
    str,
    typer.Option(
        help="Where the files come from, e.g. vllm-0.33.0; "
        "importing a label again replaces its entries."
    ),
]
DeviceOpt = Annotated[
    str | None,
    typer.Option(
        help="Store for this device (one in the store, "
        "aliases allowed) [default: the file name's "
        "device_name]."
    ),
]
CheckOpt = Annotated[
    bool,
    typer.Option(
        help="Compile each distinct config for the device's "
        "architecture (its trials' compute capability, else a "
        "table of known GPUs; no GPU needed) and leave out "
        "entries that cannot launch there."
    ),
]
EngineVersionOpt = Annotated[
    str | None,
    typer.Option(
        "--engine-version",
        help="SGLang's release, for the files in its spelling "
        "(block_shape=[128, 128]): which entries it rewrites on read [default: 0.5.23].",
    ),
]


def import_files(
    files: FilesArg,
    label: LabelOpt = "imported",
    device: DeviceOpt = None,
    check: CheckOpt = True,
    no_publish: NoPublishOpt = False,
    db: DbOpt = None,
    engine_version: EngineVersionOpt = None,
) -> None:
    """Keep existing config files as a labelled source per device and shape.

    Their entries fill M without a measured winner at export (measured winners beat them);
    they are never measured and never claimed to beat the default. Every file is checked
    before anything is stored: one bad file stores none. A folder's other entries (README,
    other kernels' or dtypes' files, subfolders) are skipped with one line each; of a file
    there in vLLM's and SGLang's spelling, the one vLLM reads is imported. Entries that cannot
    launch on the device (too much shared memory for its architecture) are stored but left out
    of every merge, with the reason. A file in SGLang's spelling gets one line naming the
    entries SGLang rewrites as it reads it (BLOCK_SIZE_K raised to block_k): SGLang runs
    another config there than the file holds.
    """
    from db import repo
    from db.repo import session_scope

    if not 1 <= len(label) <= 128 or not label.strip():
        raise fail("--label must be 1..128 characters")
    paths, skipped = _expand(files)
    parsed = _parse(paths)
    clamped = clamp_lines_of(parsed, engine_version)
    _, store = open_db(db)
    with session_scope(store) as session:
        known = repo.known_device_names(session)
    planned, unread = _plan(parsed, device, known)
    if check:
        verdicts, check_lines = _launch_checks(planned, store)
    else:
        verdicts, check_lines = (
            {},
            [
                "not checked: --no-check; the entries were imported "
                "without compiling them for their device"
            ],
        )
    _store(store, planned, verdicts, label)
    _say_imported(planned, label)
    for line in [*check_lines, *clamped]:
        plain(line)
    for path, reason in [*unread, *skipped]:
        plain(f"skipped {path.name}: {reason}")
    if not no_publish:
        for target in sorted({plan.target for plan in planned}):
            publish_device(store, target, reason="tuner import")


def _store(
    store: Engine, planned: list[Planned], verdicts: dict[Path, Verdict], label: str
) -> None:
    """Record every planned file's entries in one transaction (`db.repo.record_import`)."""
    from db import repo
    from db.repo import session_scope

    with session_scope(store) as session:
        for plan in planned:
            item = plan.item
            verdict = verdicts.get(plan.path, Verdict())
            repo.record_import(
                session,
                device_name=plan.target,
                N=item.name.N,
                K=item.name.K,
                block_shape=item.name.block_shape,
                family=item.family,
                shape_params=item.name.params_text,
                label=label,
                file_name=plan.path.name,
                sha256=item.sha256,
                configs=item.configs,
                checked_arch=verdict.arch,
                cannot_launch=verdict.cannot_launch,
            )


def _say_imported(planned: list[Planned], label: str) -> None:
    """One line per imported file: its device, label and the M it covers."""
    from tuner.files.format import coverage_summary

    for plan in planned:
        moved = (
            ""
            if plan.target == plan.item.name.device_name
            else f" (file named for {plan.item.name.device_name})"
        )
        plain(
            f"imported {plan.path.name} for {plan.target}{moved} as '{label}': "
            f"{coverage_summary(plan.item.configs, file_order=True)}"
        )
