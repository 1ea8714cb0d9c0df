"""`tuner import`: keep existing config files (files or a folder such as vLLM's configs folder)
as a labelled source per device and shape, leaving out entries that cannot launch on the device
(compiled for its architecture here, without a GPU; the verdict is stored with the entries)."""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import typer
from sqlalchemy import Engine

from db.repo import device_environments, known_device_names, record_import, session_scope
from tuner.cli.errors import fail
from tuner.cli.export import NoPublishOpt, publish_device
from tuner.cli.options import DbOpt
from tuner.cli.output import plain
from tuner.cli.store import open_db
from tuner.core import FP8_DTYPE
from tuner.files.device import target_device
from tuner.files.format import ParsedFile, coverage_summary, parse_file_for_import
from tuner.files.merge import entries_left_out
from tuner.kernels.registry import family_of_file
from tuner.measure.compile import check_entries, compile_pool, device_arch


@dataclass
class Planned:
    """A file to store: where it was read, what it holds, the device it is stored for, and its
    launch check, set by `_check_plan` (the architecture checked for, None: not checked; M ->
    why its entry cannot launch)."""

    path: Path
    item: ParsedFile
    target: str
    arch: int | None = None
    cannot_launch: dict[int, str] = field(default_factory=dict)


def _read(paths: list[Path]) -> tuple[list[tuple[Path, ParsedFile]], list[tuple[Path, str]]]:
    """Every file given and every fp8_w8a8 config file of the folders given (not their
    subfolders), parsed; what the folders hold besides (a README, `__init__.py`, other files),
    with the reason it is skipped. A file named like a config file is read: a bad body fails
    the import."""
    files, skipped = [], []
    for path in paths:
        if not path.is_dir():
            files.append(path)
            continue
        try:
            entries = sorted(path.iterdir(), key=lambda p: p.name)
        except OSError as exc:
            raise fail(f"{path}: cannot list: {exc.strerror or exc}") from None
        kinds = {entry: "not a file" if entry.is_dir() else _dtype(entry.name) for entry in entries}
        found = [entry for entry in entries if kinds[entry] == FP8_DTYPE]
        if not found:
            raise fail(f"{path}: no {FP8_DTYPE} config files in this folder")
        files += found
        skipped += [
            (entry, f"{kind}: only {FP8_DTYPE} config files are imported")
            for entry, kind in kinds.items()
            if kind != FP8_DTYPE
        ]
    parsed = []
    for path in files:
        try:
            parsed.append((path, parse_file_for_import(path.name, path.read_bytes(), str(path))))
        except OSError as exc:
            raise fail(f"{path}: cannot read: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise fail(str(exc)) from None
    return parsed, skipped


def _dtype(name: str) -> str:
    """The dtype a config file's name says, or why it is not a config file name."""
    try:
        return family_of_file(name).files.parse_file_name(name)[2]
    except ValueError:
        return "not a config file name"


def _plan(
    parsed: list[tuple[Path, ParsedFile]], device: str | None, known: list[str]
) -> tuple[list[Planned], list[tuple[Path, str]]]:
    """One file per (device, shape): of two spellings of one file, the one vLLM reads."""
    planned: dict[tuple, Planned] = {}
    skipped = []
    for path, item in sorted(parsed, key=lambda parsed: parsed[0].name != parsed[1].vllm_name):
        try:
            here = Planned(path, item, target_device(device, item.device_name, known))
        except LookupError as exc:
            raise fail(f"{path}: {exc}") from None
        kept = planned.setdefault((here.target, item.family, item.shape), here)
        if kept.path.name == item.vllm_name != path.name:  # vLLM's spelling came first
            skipped.append((path, f"SGLang's spelling; imported {kept.path.name}"))
        elif kept is not here:
            raise fail(
                f"{path}: same device and shape as {kept.path}; import one per shape and label"
            )
    return list(planned.values()), skipped


def _check_plan(plan: Planned, arch: int, pool, lines: list[str]) -> int:
    """Compile one file's entries for `arch` and record the verdict in `plan`; a line for each
    entry left out or unchecked. Returns the distinct configs compiled (0 when compiling
    failed: the file stays unchecked)."""
    item, name = plan.item, plan.path.name
    try:
        verdict = check_entries(
            item.configs,
            item.shape,
            arch=arch,
            device_name=plan.target,
            pool=pool,
            family=item.family,
        )
    except Exception as exc:  # noqa: BLE001 - a broken compiler leaves the file unchecked
        lines.append(f"not checked {name}: compiling failed: {' '.join(str(exc).split())[:200]}")
        return 0
    plan.arch, plan.cannot_launch = arch, verdict.cannot_launch
    lines += [
        f"left out {name} M={M}: {reason}; vLLM would fail with OutOfResources there"
        for M, reason in verdict.cannot_launch.items()
    ]
    lines += [f"not checked {name} M={M}: {why}" for M, why in verdict.unchecked.items()]
    return verdict.configs


def _launch_checks(planned: list[Planned], store: Engine) -> list[str]:
    """Check every file's entries for its device's architecture (from its trials' compute
    capability, else the table of known GPUs), with a line per device saying what was
    checked; the lines to print."""
    if importlib.util.find_spec("triton.backends.nvidia") is None:
        return ["not checked: this Triton has no NVIDIA backend; imported unchecked"]
    lines: list[str] = []
    pool = compile_pool(min(4, max(1, (os.cpu_count() or 2) - 1)))
    try:
        for target in dict.fromkeys(plan.target for plan in planned):
            with session_scope(store) as session:
                environments = device_environments(session, device_name=target)
            found = device_arch(target, [e.compute_capability for e in environments])
            if found is None or found.shared_bytes is None:
                lines.append(
                    f"not checked: {target}'s architecture or its shared memory per block is not "
                    "known (no trial in the store names it, not a known GPU); imported unchecked"
                )
                continue
            plans = [plan for plan in planned if plan.target == target]
            configs = sum(_check_plan(plan, found.arch, pool, lines) for plan in plans)
            left_out = entries_left_out(sum(len(plan.cannot_launch) for plan in plans))
            lines.append(
                f"checked the entries for {target} on sm{found.arch} ({found.source}; "
                f"{found.shared_bytes} bytes of shared memory per block): {configs} distinct "
                f"config(s) compiled, {left_out}"
            )
    finally:
        pool.shutdown(cancel_futures=True)
    return lines


FilesArg = Annotated[
    list[Path], typer.Argument(help="Config files (vLLM's, NVIDIA or AMD), or folders of them.")
]
LabelOpt = Annotated[
    str, typer.Option(help="Where the files come from; importing a label again replaces it.")
]
DeviceOpt = Annotated[
    str | None, typer.Option(help="Store for this device [default: the file name's].")
]
CheckOpt = Annotated[
    bool, typer.Option(help="Leave out entries that cannot launch on the device (compiled here).")
]


def import_files(
    files: FilesArg,
    label: LabelOpt = "imported",
    device: DeviceOpt = None,
    check: CheckOpt = True,
    no_publish: NoPublishOpt = False,
    db: DbOpt = None,
) -> None:
    """Keep existing config files as a labelled source per device and shape.

    Their entries fill M without a measured winner at export (measured winners beat them);
    they are never measured and never claimed to beat the default. Every file is checked
    before anything is stored: one bad file stores none. A folder's other entries (README,
    other kernels' or dtypes' files, subfolders) are skipped with one line each; of a file
    there in vLLM's and SGLang's spelling, the one vLLM reads is imported. Entries that cannot
    launch on the device (too much shared memory for its architecture) are stored but left out
    of every merge, with the reason.
    """
    if not 1 <= len(label) <= 128 or not label.strip():
        raise fail("--label must be 1..128 characters")
    parsed, skipped = _read(files)
    _, store = open_db(db)
    with session_scope(store) as session:
        planned, unread = _plan(parsed, device, known_device_names(session))
    check_lines = _launch_checks(planned, store) if check else ["not checked: --no-check"]
    _store(store, planned, label)
    for line in check_lines:
        plain(line)
    for path, reason in [*unread, *skipped]:
        plain(f"skipped {path.name}: {reason}")
    if not no_publish:
        for target in sorted({plan.target for plan in planned}):
            publish_device(store, target, reason="tuner import")


def _store(store: Engine, planned: list[Planned], label: str) -> None:
    """Record every file's entries in one transaction; one line per file: its device, label
    and the M it covers."""
    with session_scope(store) as session:
        for plan in planned:
            item = plan.item
            record_import(
                session,
                device_name=plan.target,
                **item.store_fields,
                label=label,
                file_name=plan.path.name,
                sha256=item.sha256,
                configs=item.configs,
                checked_arch=plan.arch,
                cannot_launch=plan.cannot_launch,
            )
    for plan in planned:
        named = plan.item.device_name
        moved = "" if plan.target == named else f" (file named for {named})"
        plain(
            f"imported {plan.path.name} for {plan.target}{moved} as '{label}': "
            f"{coverage_summary(plan.item.configs, file_order=True)}"
        )
