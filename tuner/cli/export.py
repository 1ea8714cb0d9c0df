"""`tuner export`, `tuner winners` and `tuner publish`: the store's winners as vLLM files, as a
table, and frozen as a release."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from sqlalchemy import Engine

from db.repo import known_device_names, list_imports, session_scope
from tuner.cli.errors import fail
from tuner.cli.options import (
    DbOpt,
    DeviceOpt,
    EngineOpt,
    TrialsKernelOpt,
)
from tuner.cli.output import console, out_folder, plain
from tuner.cli.store import device_in_store, open_db, store_files
from tuner.cli.tables import Column, print_table
from tuner.core import OutDtype
from tuner.files.device import MergeError, StoreFiles, imported_files_summary, read_device
from tuner.files.merge import DeviceFiles, write_atomically
from tuner.files.release import NothingToPublish, publish
from tuner.kernels.config import KernelConfig
from tuner.kernels.engines import SGLANG_NOTE
from tuner.kernels.registry import DEFAULT_FAMILY
from tuner.kernels.shape import FamilyShape

# The scope of the files or winners, shared by `export`, `winners`, `publish` and `verify`.
AllowPartialOpt = Annotated[bool, typer.Option(help="Also files of a partly tuned M grid.")]
OutDtypeOpt = Annotated[OutDtype | None, typer.Option(help="This output dtype only [default: all]")]
AllowStaleOpt = Annotated[
    bool, typer.Option("--allow-stale", help="Also trials of another kernel source or Triton.")
]
NoPublishOpt = Annotated[bool, typer.Option("--no-publish", help="Make no new release.")]


def publish_device(
    store: Engine, device_name: str, *, reason: str, required: bool = False, **scope: Any
) -> None:
    """Publish a device's files (`tuner.files.release.publish`, which `reason` and the
    `scope` go to: allow_partial, allow_stale, out_dtype, kernel) and print one line.

    Raises:
        typer.Exit: the winners cannot be merged (exit 2); nothing to publish where
            `required` (exit 1; else one note line).
    """
    try:
        with session_scope(store) as session:
            done = publish(session, device_name, reason=reason, **scope)
    except MergeError as exc:
        raise fail(f"{exc}; pick one with --out-dtype") from None
    except NothingToPublish as exc:
        if required:
            raise fail(str(exc), 1) from None
        plain(f"note: {exc}; no release")
        return
    plain(done.line())


def publish_cmd(
    device: DeviceOpt,
    allow_partial: AllowPartialOpt = False,
    allow_stale: AllowStaleOpt = False,
    out_dtype: OutDtypeOpt = None,
    kernel: TrialsKernelOpt = "auto",
    db: DbOpt = None,
) -> None:
    """Freeze a device's merged files as its next release, which downloads serve byte for byte.

    The release keeps every file's bytes (stored once per sha256), coverage, merge notes, the
    versions the files were tuned with, who and when. Files identical to the latest release's
    make no new release.
    """
    store, device_name = device_store(db, device)
    scope: dict[str, Any] = {"allow_partial": allow_partial, "allow_stale": allow_stale}
    scope["kernel"] = kernel
    scope["out_dtype"] = out_dtype and out_dtype.value
    publish_device(store, device_name, reason="tuner publish", required=True, **scope)


def device_store(db: str | None, device: str) -> tuple[Engine, str]:
    """The store (which must exist) and the device's key in it (`device_in_store`)."""
    _, store = open_db(db, must_exist=True)
    with session_scope(store) as session:
        return store, device_in_store(session, device)


def export(
    device: DeviceOpt,
    out: Annotated[Path, typer.Option(help="Folder to write the vLLM config files to.")],
    allow_partial: AllowPartialOpt = False,
    out_dtype: OutDtypeOpt = None,
    engine_name: EngineOpt = "vllm",
    allow_stale: AllowStaleOpt = False,
    kernel: TrialsKernelOpt = "auto",
    db: DbOpt = None,
) -> None:
    """Write one vLLM config file per (N, K) of a device from the winners in the store.

    Winners come from trials of the current kernel source and Triton major.minor only, unless
    --allow-stale. Entries imported with `tuner import` fill M that have no measured winner;
    measured winners beat them, and the notes say which M came from an import.
    """
    out_folder(out)
    store, device_name = device_store(db, device)
    read = store_files(
        store,
        device_name,
        out_dtype=out_dtype and out_dtype.value,
        allow_stale=allow_stale,
        allow_partial=allow_partial,
        engine_name=engine_name,
        kernel=kernel,
    )
    result = read.explained()
    typer.echo(source_line(read, allow_stale), err=True)
    if engine_name == "sglang":
        typer.echo(f"note: {SGLANG_NOTE}", err=True)
    _write(result, out)


def _write(result: DeviceFiles, out: Path) -> None:
    """Write the files into `out` at once; one line per file with its M, then its notes; then
    the shapes and imported entries left out, one line each; exit 1 when no file was
    written."""
    try:
        paths = write_atomically(out, {f.file_name: f.merged.text.encode() for f in result.files})
    except OSError as exc:
        raise fail(f"cannot write to {out}: {exc}") from None
    for file, path in zip(result.files, paths, strict=True):
        plain(f"wrote {path}  (M = {','.join(map(str, file.merged.configs))})")
        for line in [*file.merged.notes, *file.merged.warnings]:
            plain(f"    {line}")
    lines = [f"skipped N={s.N},K={s.K}: {s.reason}" for s in result.skipped] + result.left_out
    for line in lines:
        typer.echo(line, err=True)
    if not result.files:
        raise fail("no file written", 1)


def source_line(read: StoreFiles, allow_stale: bool) -> str:
    """What the files hold: winners of which trials, or only imported entries."""
    if not read.view.winners and read.view.imported:
        return (
            f"{read.view.device_name}: imported entries only (`tuner import`), never measured here"
        )
    if allow_stale:
        return "winners of trials of every kernel source and Triton (--allow-stale)"
    current = read.view.scope.current
    return (
        f"winners of {current.source_label} kernel trials, triton {current.triton_minor or 'any'}"
    )


def _winner_cells(row, *, kernels: bool) -> list[str]:
    """One winner row's cells (`db.views.WinnerRow`): the kernel when `kernels`."""
    key, default_us = FamilyShape.of_row(row), row.default_latency_us
    kernel = " ".join(filter(None, (key.family, key.shape.params_text)))
    speedup = None if default_us is None else f"{default_us / row.latency_us:.2f}x"
    cells = [kernel] if kernels else []
    cells += [str(row.N), str(row.K), str(row.M), KernelConfig.from_dict(row.config).short()]
    cells += [f"{row.latency_us:.1f}", "-" if default_us is None else f"{default_us:.1f}"]
    return cells + [speedup or "-", "-" if row.spread_us is None else f"{row.spread_us:.2f}"]


def winners(
    device: DeviceOpt,
    out_dtype: OutDtypeOpt = None,
    allow_stale: AllowStaleOpt = False,
    db: DbOpt = None,
) -> None:
    """Per (N, K, M): the winning config in the store against vLLM's default config.

    The winner is the config a re-timing decided on (spread_us: the noise it had to beat), else
    the fastest checked config; where several sweeps tuned an (N, K, M), the decision made
    last (latencies of different runs are not compared); from trials of the current kernel
    source and Triton major.minor only, unless --allow-stale. GB/s and TFLOP/s are in the
    report (GET /devices/{device_name}/report). A device with imported files only has no
    winners: one line says so.
    """
    _, store = open_db(db, must_exist=True)
    with session_scope(store) as session:
        device_name = device_in_store(session, device)
        # imported files only: no winner
        if device_name not in known_device_names(session, swept=True):
            files = imported_files_summary(list_imports(session, device_name=device_name))
            return plain(f"{device_name}: no winners, only imported files ({files})")
        view = read_device(
            session, device_name, allow_stale=allow_stale, out_dtype=out_dtype and out_dtype.value
        )
    rows = view.winners
    # A kernel column where rows are not all of the default family (e.g. fused-MoE ones); on a
    # narrow terminal the spread goes first.
    kernels = bool({FamilyShape.of_row(row).family for row in rows} - {DEFAULT_FAMILY})
    columns = [Column("kernel", text=True)] if kernels else []
    columns += [Column(h) for h in ("N", "K", "M")] + [Column("winner", text=True)]
    columns += [Column(h) for h in ("latency_us", "default_us", "speedup")]
    columns += [Column("spread_us", optional=True)]
    cells = [_winner_cells(row, kernels=kernels) for row in rows]
    print_table(console, columns, cells, title=device_name)
    note = view.scope.note(device_name)
    if note is not None:
        typer.echo(note, err=True)
