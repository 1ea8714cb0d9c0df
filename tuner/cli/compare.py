"""`tuner compare`: on this machine's GPU (or the interpreter), time the tuned Triton config, vLLM's
default Triton config, torch's block-scaled FP8 matmul and vLLM's own kernels when importable,
per (N, K, M) of a model; say which wins at decode and prefill, store it. The timing logic is
tuner.compare.versus's."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, cast

import typer

from tuner.cli.arguments import parse_m_values
from tuner.cli.devices import measuring_device, resolve_kernel_choice
from tuner.cli.errors import fail
from tuner.cli.options import (
    DbOpt,
    DeviceOpt,
    InterpreterRepsOpt,
    KernelChoice,
    KernelOpt,
    ModelOpt,
    TpOpt,
)
from tuner.cli.output import console, plain
from tuner.cli.store import open_db, store_files
from tuner.cli.tables import Column, print_table
from tuner.core import REQUIRED_M, OutDtype
from tuner.measure.noise import RETIME_ROUNDS

if TYPE_CHECKING:
    from tuner.compare.versus import CandidateSampler


def _cells(point, backends) -> list[str]:
    cells = [str(point.M)]
    for name in backends:
        value = point.latency(name)
        status = next(t.status for t in point.times if t.backend == name)
        cells.append(f"{value:.1f}" if value is not None else status)
    cells.append(point.fastest or "-")
    return cells


def _print_shape(N: int, K: int, points, unit: str, default) -> None:
    """One shape's table; vLLM's default kernel's column (`default`, a VllmDefault) gets a *."""
    from tuner.compare.kernel_names import TRITON_TUNED, column_header
    from tuner.compare.vllm_default import default_backend

    shown = [
        t.backend
        for t in points[0].times
        if t.status != "unavailable" or any(p.latency(t.backend) is not None for p in points)
    ]
    marked = default_backend(points, default)
    # Each column is headed by the kernel's one name, broken after its '-' when the names
    # whole do not fit the terminal; the fastest column goes first when it is still too narrow.
    rows = [_cells(p, shown) for p in points]
    headers = [name + ("*" if name == marked else "") for name in shown]
    widths = [max(len(h), *(len(row[i + 1]) for row in rows)) for i, h in enumerate(headers)]
    fastest = max(len("fastest"), *(len(row[-1]) for row in rows))
    if (
        sum(widths) + fastest + len(str(max(p.M for p in points))) + 3 * (len(widths) + 1)
        > console.width
    ):
        headers = [column_header(h) for h in headers]
    columns = [Column("M"), *(Column(h) for h in headers), Column("fastest", optional=True)]
    print_table(console, columns, rows, title=f"N={N},K={K}, latency_us, {unit}")
    if marked is not None:
        plain(f"* vLLM's default kernel here: {default.kernel} (from {default.source})")
    configs = {p.M: t.note for p in points for t in p.times if t.backend == TRITON_TUNED}
    plain(f"{TRITON_TUNED}: " + "; ".join(f"M={M} {note}" for M, note in configs.items()))
    for point in points:
        for time in point.times:
            if time.status == "failed":
                plain(f"failed: {time.backend} at M={point.M}: {time.note}")


CompareMOpt = Annotated[str, typer.Option("--m", help="M values to time, comma-separated.")]
DEFAULT_COMPARE_M = ",".join(map(str, REQUIRED_M))
CompareRoundsOpt = Annotated[
    int,
    typer.Option(
        min=2,
        max=10_000,
        help="Interleaved rounds per (N, K, M): one sample of each kernel per round.",
    ),
]
CompareOutDtypeOpt = Annotated[OutDtype, typer.Option("--out-dtype", help="Output dtype.")]
CompareSeedOpt = Annotated[int, typer.Option(min=0, max=2**31 - 1, help="Seed of the inputs.")]


def compare(
    device: DeviceOpt,
    model: ModelOpt,
    tp: TpOpt = None,
    m: CompareMOpt = DEFAULT_COMPARE_M,
    rounds: CompareRoundsOpt = RETIME_ROUNDS,
    out_dtype: CompareOutDtypeOpt = OutDtype.bfloat16,
    seed: CompareSeedOpt = 0,
    interpreter_reps: InterpreterRepsOpt = 3,
    kernel: KernelOpt = KernelChoice.auto,
    db: DbOpt = None,
) -> None:
    """Time the kernels vLLM could run for a model's block-FP8 GEMMs, and say
    whether `--linear-backend triton` with the tuned files pays off.

    Per (N, K, M), on one GPU and with the same inputs: our Triton kernel with
    the config vLLM would pick from this device's files (triton-tuned) and with
    vLLM's default config (triton-default), torch.nn.functional.scaled_mm with
    block-wise scales (torch-scaled_mm; on the interpreter, torch-dequant-cpu),
    vLLM's CUTLASS and DeepGEMM ops when vLLM is importable (vllm-cutlass,
    vllm-deepgemm), and Marlin and Humming through vLLM's own kernel classes
    (vllm-marlin, vllm-humming; their weight processing done before timing).
    Each kernel has that one name in the tables, the summary, the stored run
    and the report. Each is first checked against the float64
    reference; those that pass are timed interleaved as verify does. A kernel
    that cannot run here is shown as unavailable with the reason.

    Prints a table per shape, vLLM's default kernel on this GPU marked with *
    (vLLM's own selection, asked as a server of the model asks it, with its model
    type and weight shapes, where vLLM sees this GPU; else the tuner's table per
    shape, and one line says why), then
    for decode (M <= 32) and prefill (M >= 2048) the fastest kernel over the
    model's shapes, and per M, for decode and for prefill, whether
    `--linear-backend triton` with the tuned files beats vLLM's default and by
    how much. The run is stored (GET /devices/{device}/comparisons, the report).

    --kernel says whose Triton kernel is timed and whose trials' files are read,
    one source for both: auto is the installed vLLM's where vLLM is importable
    with the real Triton, else the builtin (whose files are those `tuner export
    --kernel auto` writes; beside a vLLM whose Triton is its placeholder, a host
    without an active GPU driver, the builtin's trials).

    --device interpreter times on the CPU: Triton's interpreter against torch
    on the CPU; CPU timings, useful to try the command, not to decide.
    """
    model_shapes, m_values = _parse(model, tp, m)
    timed, read_kernel = _kernels(kernel)
    _, store = open_db(db, must_exist=True)
    device_name, runner, _ = measuring_device(store, device, interpreter_reps)
    tuned = _tuned(
        store,
        device_name,
        out_dtype.value,
        tuple(model_shapes.block_shape),
        kernel=read_kernel,
        timed=timed,
    )
    env, defaults = _defaults(runner, timed, model_shapes, out_dtype.value)
    points = _run(
        model_shapes,
        m_values,
        tuned,
        defaults,
        runner=runner,
        kernel=timed,
        out_dtype=out_dtype.value,
        seed=seed,
        rounds=rounds,
        interpreter_reps=interpreter_reps,
    )
    _report(store, device_name, env, model_shapes, out_dtype.value, points, defaults)


def _parse(model: str, tp: int | None, m: str) -> tuple:
    """(the model's shapes, --m's sorted M values); a bad value exits 2 with one line."""
    from tuner.inputs.shapes import UnknownModelError, load_shapes

    try:
        return load_shapes(model, tp), parse_m_values(m)
    except (UnknownModelError, ValueError) as exc:
        raise fail(str(exc).strip("'\"")) from None


def _kernels(kernel: KernelChoice) -> tuple[str, str]:
    """(whose Triton kernel is timed, "builtin" or "vllm"; whose trials' files are read,
    "auto", "vllm" or "builtin") for --kernel (`tuner.cli.devices.resolve_kernel_choice`)."""
    from tuner.kernels.source import vllm_version

    timed, _ = resolve_kernel_choice(kernel)
    # auto beside a vLLM whose Triton is a placeholder times the builtin (the note above says
    # why): the files are then the builtin's trials too, as a sweep here (auto) made them.
    read_kernel = (
        "builtin"
        if (kernel is KernelChoice.auto and timed == "builtin" and vllm_version() is not None)
        else kernel.value
    )
    return timed, read_kernel


def _defaults(runner, timed: str, model_shapes, out_dtype: str) -> tuple[dict, dict]:
    """(this process's environment, (N, K) -> vLLM's default kernel here); one line per
    reason vLLM's own selection could not be asked."""
    from tuner.compare.vllm_default import default_kernels, table_reasons
    from tuner.run.worker import collect_environment

    env = collect_environment(runner, kernel=timed)
    defaults = default_kernels(
        model_shapes.pairs(),
        env["compute_capability"],
        out_dtype,
        model_type=model_shapes.model_type,
    )
    for line in table_reasons(defaults):
        plain(line)
    return env, defaults


def _report(
    store, device_name: str, env: dict, model_shapes, out_dtype: str, points, defaults
) -> None:
    """The verdict lines (decode, prefill, vLLM's default against the tuned files), then the
    run stored and its comparison id said."""
    from tuner.compare.versus import verdicts
    from tuner.compare.vllm_default import flag_lines

    lines = [v.line() for v in verdicts(points)] + flag_lines(points, defaults)
    for line in lines:
        plain(line)
    comparison_id = _store(store, device_name, env, model_shapes, out_dtype, lines, points)
    plain(f"stored as comparison {comparison_id} of {device_name}")


def _tuned(
    store,
    device_name: str,
    out_dtype: str,
    block_shape: tuple[int, ...],
    *,
    kernel: str,
    timed: str,
) -> dict:
    """(N, K) -> the dense file's configs (M key -> config dict) of this device in the store,
    from the trials of `kernel`'s source ("auto", "vllm" or "builtin"); one line on stderr
    says whose files they are and which kernel (`timed`, "vllm" or "builtin") runs them."""
    from tuner.files.merge import dense_key

    read = store_files(
        store,
        device_name,
        out_dtype=out_dtype,
        allow_stale=False,
        allow_partial=True,
        kernel=kernel,
    )
    current = read.view.scope.current
    typer.echo(
        f"triton-tuned: files of {current.source_label} kernel trials, triton "
        f"{current.triton_minor or 'any'}; timed with the {timed} kernel",
        err=True,
    )
    if current.kernel_source != timed:
        # auto where vLLM is not importable reads a device's vLLM-kernel trials, if it has any
        # (tuner.files.provenance.read_source), but only the builtin kernel can run here.
        typer.echo(
            "note: vLLM is not importable here: its kernel's files are timed with the "
            "builtin kernel (--kernel builtin reads the builtin's trials)",
            err=True,
        )
    files = read.explained()
    return {
        (f.N, f.K): f.merged.configs
        for f in files.files
        if f.key == dense_key(f.N, f.K, block_shape)
    }


def _store(store, device_name: str, env: dict, model_shapes, out_dtype: str, lines, points) -> int:
    """Record the run (its environment, verdict lines and every point); its comparison id."""
    from db import repo
    from db.repo import session_scope

    with session_scope(store) as session:
        environment_id = repo.get_or_create_environment(session, **env)
        return repo.record_comparison(
            session,
            device_name=device_name,
            environment_id=environment_id,
            model=model_shapes.model,
            tp=model_shapes.tp,
            out_dtype=out_dtype,
            verdicts=lines,
            points=[
                repo.PointRow(
                    p.N, p.K, p.M, t.backend, t.status, t.latency_us, t.p20_us, t.p80_us, t.note
                )
                for p in points
                for t in p.times
            ],
        )


# The line above the tables: what each column times ({whose}: whose Triton kernel).
COLUMNS_LINE = (
    "columns (microseconds per GEMM): triton-tuned = {whose} with the config vLLM picks from "
    "this device's files; triton-default = with vLLM's default config; torch-scaled_mm = "
    "torch scaled_mm, block-wise scales; torch-dequant-cpu = dequantize + matmul on the CPU (a "
    "stand-in, not a vLLM kernel); vllm-deepgemm, vllm-cutlass = vLLM's ops; vllm-marlin, "
    "vllm-humming = vLLM's kernel classes' apply_weights on bf16/fp16 activations (weight "
    "processing not timed)"
)


def _run(
    model_shapes,
    m_values,
    tuned,
    defaults,
    *,
    runner,
    kernel,
    out_dtype,
    seed,
    rounds,
    interpreter_reps,
):
    """Every (shape, M) point, with a progress bar on stderr; prints each shape's table, vLLM's
    default kernel (`defaults`: (N, K) -> VllmDefault) marked. `kernel` ("builtin" or "vllm")
    is whose Triton kernel the tuned and default columns time."""
    from functools import partial

    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from tuner.compare.backends import library_kernels
    from tuner.kernels.registry import DEFAULT_FAMILY, get_family

    block_shape = tuple(model_shapes.block_shape)
    library, unavailable = library_kernels(runner.torch_device, block_shape)
    default = get_family(DEFAULT_FAMILY).default_config
    unit = "GPU timings" if runner.on_gpu else f"CPU timings ({runner.name})"
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
    )
    plain(
        COLUMNS_LINE.format(
            whose="vLLM's Triton kernel" if kernel == "vllm" else "our Triton kernel"
        )
    )
    time_point = partial(
        _point,
        block_shape=block_shape,
        default=default,
        library=library,
        unavailable=unavailable,
        device=runner.torch_device,
        kernel=kernel,
        out_dtype=out_dtype,
        seed=seed,
        rounds=rounds,
        interpreter_reps=interpreter_reps,
    )
    points = []
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        bar_id = bar.add_task("compare", total=len(model_shapes.pairs()) * len(m_values))
        for N, K in model_shapes.pairs():
            shape_points = []
            for M in m_values:
                shape_points.append(time_point(N, K, M, tuned.get((N, K))))
                bar.update(bar_id, advance=1, description=f"N={N},K={K} M={M}")
            bar.console.file.flush()
            _print_shape(N, K, shape_points, unit, defaults[(N, K)])
            points += shape_points
    for name, reason in sorted(unavailable.items()):
        plain(f"not timed: {name}: {reason}")
    return points


def _point(
    N: int,
    K: int,
    M: int,
    configs,
    *,
    block_shape,
    default,
    library,
    unavailable,
    device,
    kernel,
    out_dtype,
    seed,
    rounds,
    interpreter_reps,
):
    """One (N, K, M) timed (`tuner.compare.versus.compare_point`): the tuned config vLLM picks
    from `configs` (the shape's file; None: none), the default config (`default`: the default
    family's `default_config`) and the library kernels; those of `unavailable` (name -> reason)
    shown as not timed."""
    from tuner.compare.backends import Candidate, CandidateRunner
    from tuner.compare.kernel_names import TRITON_DEFAULT, TRITON_TUNED
    from tuner.compare.versus import compare_point
    from tuner.files.format import vllm_pick_key
    from tuner.kernels.config import KernelConfig
    from tuner.kernels.shape import Shape
    from tuner.measure.noise import retime_interleaved
    from tuner.measure.runner import Problem

    candidates = [Candidate(TRITON_DEFAULT, default(Shape(N, K, block_shape), M))]
    missing = dict(unavailable)
    if configs:
        key = vllm_pick_key(configs, M)
        candidates.insert(0, Candidate(TRITON_TUNED, KernelConfig.from_dict(configs[key])))
    else:
        missing[TRITON_TUNED] = "no file for this shape in the store"
    candidates += [Candidate(name) for name in library]
    runner = CandidateRunner(
        Problem(M=M, N=N, K=K, block_shape=block_shape, out_dtype=out_dtype, kernel=kernel),
        device=device,
        library=library,
        seed=seed,
        interpreter_reps=interpreter_reps,
    )
    # CandidateRunner runs KernelRunner's check and timing on Candidates (its _launch sends a
    # Triton config to the kernel, a library backend to its kernel): a CandidateSampler.
    sampler = cast("CandidateSampler", runner)
    return compare_point(
        N,
        K,
        M,
        runner=sampler,
        candidates=candidates,
        unavailable=missing,
        rounds=rounds,
        retime=retime_interleaved,
    )
