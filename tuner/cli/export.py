"""`tuner export` and `tuner winners`: the store's winners as vLLM files, and as a table."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tuner.cli.engines import EngineVersionOpt, clamp_lines
from tuner.cli.errors import fail
from tuner.cli.options import DbOpt, DeviceOpt, EngineName, KernelChoice, TrialsKernelOpt
from tuner.cli.output import console, out_folder
from tuner.cli.store import device_in_store, open_db, store_files
from tuner.cli.tables import Column, print_table
from tuner.core import OutDtype

if TYPE_CHECKING:
    from tuner.files.device import StoreFiles
    from tuner.files.merge import DeviceFile, DeviceFiles


OutOpt = Annotated[Path, typer.Option(help="Folder to write the vLLM config files to.")]
AllowPartialOpt = Annotated[
    bool, typer.Option(help="Also write files whose M grid is not fully tuned yet.")
]
OutDtypeOpt = Annotated[
    OutDtype | None, typer.Option(help="Only trials with this output dtype [default: all].")
]
EngineNameOpt = Annotated[
    EngineName,
    typer.Option(
        "--engine",
        help="File-name spelling: vllm, or sglang (block_shape=[128, 128]).",
    ),
]
AllowStaleOpt = Annotated[
    bool,
    typer.Option(
        "--allow-stale",
        help="Also use trials timed with another kernel source or another "
        "Triton major.minor than the current ones.",
    ),
]


def export(
    device: DeviceOpt,
    out: OutOpt,
    allow_partial: AllowPartialOpt = False,
    out_dtype: OutDtypeOpt = None,
    engine_name: EngineNameOpt = EngineName.vllm,
    allow_stale: AllowStaleOpt = False,
    kernel: TrialsKernelOpt = KernelChoice.auto,
    db: DbOpt = None,
    engine_version: EngineVersionOpt = None,
) -> None:
    """Write one vLLM config file per (N, K) of a device from the winners in the store.

    Winners come from trials of the current kernel source and Triton major.minor only, unless
    --allow-stale. Entries imported with `tuner import` fill M that have no measured winner;
    measured winners beat them, and the notes say which M came from an import. With --engine
    sglang, one line per file names the entries SGLang rewrites as it reads them (BLOCK_SIZE_K
    raised to block_k).
    """
    from db.repo import session_scope  # the store's stack loads only when a command opens it
    from tuner.kernels.engines import SGLANG_NOTE

    out_folder(out)
    _, store = open_db(db, must_exist=True, read_only=True)

    with session_scope(store) as session:
        device_name = device_in_store(session, device)
    read = store_files(
        store,
        device_name,
        out_dtype=out_dtype.value if out_dtype else None,
        allow_stale=allow_stale,
        allow_partial=allow_partial,
        engine_name=engine_name.value,
        hint="; pick one with --out-dtype",
        kernel=kernel.value,
    )
    result = read.explained()
    typer.echo(source_line(read, allow_stale), err=True)
    if engine_name == "sglang":
        typer.echo(f"note: {SGLANG_NOTE}", err=True)
    _write(result.files, out)
    if engine_name == "sglang":
        for line in clamp_lines(
            device_name, engine_version, [(f.file_name, f.merged.configs) for f in result.files]
        ):
            typer.echo(f"warning: {line}", err=True)
    _say_left_out(result, device_name, read.stale_skips)


def _say_left_out(result: DeviceFiles, device_name: str, stale_skips: int) -> None:
    """The shapes and imported entries left out, one line each, and a count; exit 1 when no
    file was written."""
    from tuner.files.merge import entries_left_out

    for skipped in result.skipped:
        typer.echo(f"skipped N={skipped.N},K={skipped.K}: {skipped.reason}", err=True)
    for line in result.left_out:
        typer.echo(line, err=True)
    if result.left_out:
        count = entries_left_out(len(result.left_out))
        typer.echo(f"{count}: they cannot launch on {device_name}", err=True)
    if not result.files:
        because = (
            f"; {stale_skips} shape(s) lack winners because their trials are stale: "
            "--allow-stale uses them"
            if stale_skips
            else ""
        )
        raise fail(f"no file written{because}", 1)


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


def _write(files: list[DeviceFile], out: Path) -> None:
    """Write the merged files into `out` at once, one line per file with its M and notes."""
    from tuner.files.merge import write_files_atomically

    try:
        paths = write_files_atomically(files, out)
    except OSError as exc:
        raise fail(f"cannot write to {out}: {exc}") from None
    for file, path in zip(files, paths, strict=True):
        merged = file.merged
        console.print(
            f"wrote {path}  (M = {','.join(map(str, merged.configs))})",
            soft_wrap=True,
            markup=False,
            highlight=False,
        )
        for line in [*merged.notes, *merged.warnings]:
            console.print(f"    {line}", soft_wrap=True, markup=False, highlight=False)


def _winner_columns(*, kernels: bool, ceilings: bool) -> list[Column]:
    """`tuner winners`' columns: the kernel when rows of another family than the default (e.g.
    MoE) are among them, the shares of the ceilings when measured. On a narrow terminal the
    roofline figures go first, then the spread (tuner.cli.tables)."""
    columns = [Column("kernel", text=True)] if kernels else []
    columns += [
        Column("N"),
        Column("K"),
        Column("M"),
        Column("winner", text=True),
        Column("latency_us"),
        Column("default_us"),
        Column("speedup"),
        Column("spread_us", optional=True),
        Column("GB/s", optional=True),
        Column("TFLOP/s", optional=True),
    ]
    if ceilings:
        columns += [Column("% copy BW", optional=True), Column("% FP8 mm", optional=True)]
    return columns


def _winner_cells(row, *, kernels: bool, ceilings) -> list[str]:
    """One winner row's cells (`db.repo.WinnerRow`), under `_winner_columns`."""
    from tuner.kernels.config import KernelConfig
    from tuner.kernels.shape import FamilyShape
    from tuner.measure.roofline import shape_roofline

    default_us = row.default_latency_us
    key = FamilyShape.of_row(row)
    # Only a family whose calls are one GEMM has roofline figures (`roofline_gemm`).
    figures = shape_roofline(key, row.M, row.latency_us, ceilings)
    kernel = " ".join(filter(None, (key.family, key.shape.params_text)))
    cells = ([kernel] if kernels else []) + [
        str(row.N),
        str(row.K),
        str(row.M),
        KernelConfig.from_dict(row.config).short(),
        f"{row.latency_us:.1f}",
        "-" if default_us is None else f"{default_us:.1f}",
        "-" if default_us is None else f"{default_us / row.latency_us:.2f}x",
        "-" if row.spread_us is None else f"{row.spread_us:.2f}",
        *((_figure(figures.gbps, 1), _figure(figures.tflops, 2)) if figures else ("-", "-")),
    ]
    if ceilings:
        cells += [
            "-" if ratio is None else f"{100 * ratio:.1f}"
            for ratio in ((figures.copy_ratio, figures.fp8_mm_ratio) if figures else (None, None))
        ]
    return cells


def winners(
    device: DeviceOpt,
    out_dtype: Annotated[
        OutDtype | None, typer.Option(help="Only trials with this output dtype [default: all].")
    ] = None,
    allow_stale: Annotated[
        bool,
        typer.Option(
            "--allow-stale",
            help="Also use trials timed with another kernel source or another "
            "Triton major.minor than the current ones.",
        ),
    ] = False,
    db: DbOpt = None,
) -> None:
    """Per (N, K, M): the winning config in the store against vLLM's default config.

    The winner is the config a re-timing decided on (spread_us: the noise it had to beat), else
    the fastest checked config; where several sweeps tuned an (N, K, M), the decision made
    last (latencies of different runs are not compared); from trials of the current kernel
    source and Triton major.minor only, unless --allow-stale. GB/s counts the compulsory bytes
    of A, B, the scales and C over the latency, TFLOP/s 2*M*N*K over it; with ceilings measured
    on the GPU
    (each CUDA worker measures them at start), their % of a device-to-device copy and of
    torch's FP8 matrix product. A device with imported files only (`tuner import`, never
    swept) has no winners: one line says so and how to see its files.
    """
    from db import repo
    from db.repo import session_scope
    from tuner.files.device import read_device
    from tuner.kernels.registry import DEFAULT_FAMILY
    from tuner.kernels.shape import FamilyShape

    _, store = open_db(db, must_exist=True, read_only=True)

    with session_scope(store) as session:
        device_name = device_in_store(session, device)
        if device_name not in repo.list_device_names(session):
            imports = repo.list_imports(session, device_name=device_name)
            typer.echo(imported_only_line(device_name, imports))
            return
        view = read_device(
            session,
            device_name,
            allow_stale=allow_stale,
            out_dtype=out_dtype.value if out_dtype else None,
        )
        ceilings = repo.device_ceilings(session, device_name=device_name)
    rows, note = view.winners, view.scope.note(device_name)
    # A kernel column where rows are not all of the default family (e.g. fused-MoE ones).
    kernels = bool({FamilyShape.of_row(row).family for row in rows} - {DEFAULT_FAMILY})
    columns = _winner_columns(kernels=kernels, ceilings=bool(ceilings))
    cells_of_rows = [_winner_cells(row, kernels=kernels, ceilings=ceilings) for row in rows]
    print_table(console, columns, cells_of_rows, title=device_name)
    if note is not None:
        typer.echo(note, err=True)
    runs = runs_summary(rows)
    if runs is not None:
        typer.echo(runs, err=True)


def imported_only_line(device_name: str, imports) -> str:
    """`tuner winners`' one line for a device with imported files and no sweeps: why there is
    no winner to show, and how to see the files.

    Args:
        device_name: vLLM's device key, as stored.
        imports: its imported files (`db.repo.list_imports`), at least one.
    """
    from tuner.files.imports import imported_files_summary

    return (
        f"{device_name}: no winners, it has only imported files "
        f"({imported_files_summary(imports)}), never swept here; `tuner export --device "
        f"{device_name} --out DIR` writes them with a note per entry, GET "
        f"/devices/{device_name}/imports lists them"
    )


def runs_summary(rows) -> str | None:
    """One line naming the sweeps whose winners were set aside for a later sweep's (per (N, K,
    M), the decision made last stands; `db.views`), or None when no key has several.

    Args:
        rows: `db.repo.WinnerRow`s.
    """
    aside = sorted({sweep for row in rows for sweep in row.other_sweeps})
    if not aside:
        return None
    keys = sum(bool(row.other_sweeps) for row in rows)
    return (
        f"note: {keys} (N, K, M) were tuned by several sweeps; each shows the winner decided "
        f"last (else the newest sweep's), not the lowest latency across runs; set aside: "
        f"sweep(s) {', '.join(map(str, aside))} (`tuner verify` re-times interleaved)"
    )


def _figure(value: float, decimals: int) -> str:
    """A rate with `decimals` decimals, or 3 significant digits when that would show 0 (the
    interpreter's rates are tiny)."""
    text = f"{value:.{decimals}f}"
    return text if float(text) != 0 or value == 0 else f"{value:.3g}"
