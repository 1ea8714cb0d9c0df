"""`tuner verify`: time the config vLLM runs from a device's files against its default, on and
off the keys; `--fix` tunes the M values where it loses. The store is read here; the timing
logic is tuner.compare.verify's. Fused-MoE files are not verified yet (one line says so)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Annotated

import typer

from tuner.cli.options import (
    DEFAULT_STRATEGY_NAME,
    ConfigsOpt,
    DbOpt,
    DeviceOpt,
    InterpreterRepsOpt,
    LeaseOpt,
    OutDtype,
    TrialTimeoutOpt,
    console,
    device_in_store,
    err_console,
    fail,
    load_configs,
    open_db,
    parse_m_values,
    plain,
    resolve_backend,
    store_files,
    strategy_names,
)
from tuner.cli.publish import NoPublishOpt, publish_device
from tuner.cli.tables import Column, print_table
from tuner.cli.verify_fix import Fixer, shape_label
from tuner.compare.verify import (
    INTERPRETER_NOISE_FLOOR,
    PointResult,
    RunnerFactory,
    ShapeVerification,
    Verdict,
    check_points,
    timed_points,
    verify_shape,
)
from tuner.files.format import VLLM_M_GRID
from tuner.files.merge import DeviceFiles, dense_key
from tuner.inputs.shapes import ModelShapes
from tuner.kernels.registry import DEFAULT_FAMILY
from tuner.measure.noise import RETIME_ROUNDS
from tuner.run.options import DEFAULT_LEASE_S, RunOptions
from tuner.search.defaults import DEFAULT_TRIALS

# Search of the `--fix` trials: `tuner sweep`'s defaults.
FIX_STRATEGY = DEFAULT_STRATEGY_NAME  # what `tuner sweep` runs by default
FIX_TRIALS = DEFAULT_TRIALS
# Tune-and-check passes of `--fix`: each new key adds midpoints and neighbours to check.
MAX_FIX_PASSES = 3
# `--m all`: vLLM's 18 batch sizes on top of the sweeps' grid.
M_ALL = "all"
# Seconds of progress the ETA averages over: all of it (a timed M can take minutes on the
# interpreter; rich's 30 s default would leave the ETA blank there).
ETA_WINDOW_S = 7 * 24 * 3600.0
WHERE_PICK_SWITCHES = ("the midpoint of each pair of neighbouring keys (where vLLM's nearest-key "
                       "pick switches) and key - 1, key + 1")


def shape_grid(choice: str | tuple[int, ...] | None, sweep_grid: Sequence[int]) -> list[int]:
    """The grid M checked for one file besides its keys, midpoints and neighbours.

    Args:
        choice: None (the default): the M grid of the sweeps that made the file; `M_ALL`: that
            and vLLM's 18 batch sizes (`tuner.files.format.VLLM_M_GRID`); a tuple: `--m`'s list.
        sweep_grid: the M the shape's sweeps requested.

    Returns:
        Ascending M values.
    """
    if choice is None:
        return sorted(set(sweep_grid))
    if choice == M_ALL:
        return sorted(set(sweep_grid) | set(VLLM_M_GRID))
    return sorted(set(choice))


def m_set_line(choice: str | tuple[int, ...] | None) -> str:
    """One line: which M values verify checks per shape, and why."""
    if choice is None:
        return (f"M checked per shape: its keys, the M grid of the sweeps that made it, "
                f"{WHERE_PICK_SWITCHES}, up to {VLLM_M_GRID[-1]} or the largest key; "
                f"`--m all` adds vLLM's {len(VLLM_M_GRID)} batch sizes")
    if choice == M_ALL:
        return (f"M checked per shape (--m all): vLLM's {len(VLLM_M_GRID)} batch sizes, the M "
                f"grid of the sweeps that made it, its keys, {WHERE_PICK_SWITCHES}")
    return (f"M checked per shape (--m): {', '.join(map(str, choice))}, its keys, "
            f"{WHERE_PICK_SWITCHES}")


def _runner_factory(backend: str, *, block_shape: tuple[int, int], out_dtype: str, seed: int,
                    interpreter_reps: int) -> RunnerFactory:
    """(N, K, M) -> tuner.measure.runner.KernelRunner on this process's device (tests replace
    this)."""
    from tuner.measure.runner import KernelRunner, Problem

    def make(N: int, K: int, M: int) -> KernelRunner:
        problem = Problem(M=M, N=N, K=K, block_shape=block_shape, out_dtype=out_dtype)
        return KernelRunner(problem, backend=backend, seed=seed,
                            interpreter_reps=interpreter_reps)

    return make


def _use_backend(backend: str, visible: Sequence[str | None]) -> None:
    """Make this process run the kernel on the interpreter, or on the first matching GPU.

    TRITON_INTERPRET must be set before tuner.kernels.dense.kernel is imported (triton.jit
    reads it then).
    """
    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    if backend == "interpreter":
        if "tuner.kernels.dense.kernel" in sys.modules and not interpreted:
            raise fail("the kernel was already loaded for a GPU in this process; run "
                       "`tuner verify --device interpreter` in a fresh process")
        os.environ["TRITON_INTERPRET"] = "1"
        return
    if interpreted:
        raise fail("TRITON_INTERPRET=1 is set: unset it to verify on a GPU")
    import torch

    from tuner.run.gpus import visible_gpus

    index = next(gpu.index for gpu in visible_gpus() if gpu.visible_id == visible[0])
    torch.cuda.set_device(index)


def _verdict_text(point: PointResult) -> str:
    if point.verdict is Verdict.FAILED:
        return f"[red]failed[/red]: {point.error}"
    if point.verdict is Verdict.SLOWER:
        return "[red]slower[/red]"
    return "ok" if point.timed else "ok (default)"


def print_shape_table(result: ShapeVerification, *, title: str, out=console) -> None:
    """One row per checked M: vLLM's key and config there, both medians, speedup, verdict;
    on the rich console `out`."""
    columns = [Column("M"), Column("key"), Column("config", text=True), Column("chosen_us"),
               Column("default_us"), Column("noise_us", optional=True), Column("speedup"),
               Column("verdict", text=True)]
    rows = [[str(point.M), str(point.key), point.config.short(),
             *("-" if us is None else f"{us:.1f}"
               for us in (point.chosen_us, point.default_us, point.noise_us)),
             "-" if point.speedup is None else f"{point.speedup:.2f}x", _verdict_text(point)]
            for point in result.points]
    print_table(out, columns, rows, title=title)


def summary_line(results: Sequence[ShapeVerification]) -> str:
    """e.g. "2 shapes, 12 M values: 10 ok (7 run the default config), 2 slower, 0 failed"."""
    points = [point for result in results for point in result.points]
    counts = {verdict: sum(point.verdict is verdict for point in points) for verdict in Verdict}
    untimed = sum(point.verdict is Verdict.OK and not point.timed for point in points)
    return (f"{len(results)} shape(s), {len(points)} M values: {counts[Verdict.OK]} ok "
            f"({untimed} run the default config), {counts[Verdict.SLOWER]} slower, "
            f"{counts[Verdict.FAILED]} failed")


def offending_lines(results: Sequence[ShapeVerification]) -> list[str]:
    """One line per shape with slower or failed M, naming them."""
    lines = []
    for result in results:
        for what, values in (("slower than the default", result.slower),
                             ("failed", result.failed)):
            if values:
                lines.append(f"{shape_label(result.N, result.K)}: {what} at "
                             f"M={', '.join(map(str, values))}")
    return lines


def _verify_files(
    model_shapes: ModelShapes, files: DeviceFiles, grids, *,
    choice: str | tuple[int, ...] | None, only_shapes: set[tuple[int, int]] | None,
    make_runner: RunnerFactory, rounds: int | None, title: str, noise_floor: float = 0.0,
) -> tuple[list[ShapeVerification], list[str]]:
    """Verify each model shape's file (or those of `only_shapes`) at the M of `check_points`
    over `shape_grid(choice, ...)`, with a progress bar on stderr counting the M where a kernel
    is timed; returns the results and one line per shape without a file."""
    from rich.progress import Progress

    from tuner.run.sweep import progress_columns

    block_shape = tuple(model_shapes.block_shape)
    by_shape = {file.key: file for file in files.files}
    skipped = {item.key: item.reason for item in files.skipped}
    planned, missing = [], []
    for N, K in model_shapes.shapes:
        if only_shapes is not None and (N, K) not in only_shapes:
            continue
        key = dense_key(N, K, block_shape)  # the dense GEMM's files
        file = by_shape.get(key)
        if file is None:
            reason = skipped.get(key, "no trials in the store")
            missing.append(f"{shape_label(N, K)}: no file ({reason}); vLLM runs its default "
                           "config there")
            continue
        configs = file.merged.configs
        m_points = check_points(configs, shape_grid(choice, grids.get(key, ())))
        planned.append((N, K, configs, m_points, set(timed_points(configs, m_points,
                                                                    block_shape))))
    # With stdout on the same terminal the tables go through the bar's console, above the bar;
    # otherwise (a pipe or file) stdout gets them as they are and rich draws the bar only on a
    # terminal (elsewhere it writes its last state once, at the end).
    out = err_console if console.is_terminal and err_console.is_terminal else console
    results: list[ShapeVerification] = []
    with Progress(*progress_columns("timed M"), console=err_console, transient=False,
                  speed_estimate_period=ETA_WINDOW_S,
                  redirect_stdout=console.is_terminal) as bar:
        task = bar.add_task("verify", total=sum(len(timed) for *_, timed in planned))
        bar.advance(task, 0)  # the ETA's first sample: now

        for N, K, configs, m_points, timed in planned:
            bar.update(task, description=f"verify {shape_label(N, K)}")
            out.print(f"{shape_label(N, K)}: keys {', '.join(map(str, configs))}; checking "
                      f"{len(m_points)} M values", soft_wrap=True, markup=False, highlight=False)
            result = verify_shape(
                N=N, K=K, block_shape=block_shape, configs=configs, m_points=m_points,
                make_runner=make_runner, rounds=rounds, noise_floor=noise_floor,
                on_point=lambda point, timed=timed: bar.advance(task, int(point.M in timed)))
            print_shape_table(result, title=f"{shape_label(N, K)} {title}", out=out)
            results.append(result)
        bar.update(task, description="verify")
    return results, missing


def _fix(fixer: Fixer, results: list[ShapeVerification], model_shapes: ModelShapes, *,
         choice: str | tuple[int, ...] | None, make_runner: RunnerFactory, rounds: int | None,
         read, noise_floor: float = 0.0) -> list[ShapeVerification]:
    """`--fix`: tune the offending M of each shape, then check the shapes it touched again in
    full (new keys make new midpoints and neighbours), up to MAX_FIX_PASSES times.

    Returns:
        The latest result of every shape.

    Raises:
        typer.Exit: interrupted (130), or a touched shape has no file afterwards (1).
    """
    latest = {(result.N, result.K): result for result in results}
    for fix_pass in range(1, MAX_FIX_PASSES + 1):
        offending = {shape: result.offending for shape, result in latest.items()
                     if result.offending}
        if not offending:
            break
        fixer.tune(offending)
        files = read()
        try:
            again, missing = _verify_files(
                model_shapes, files.explained(), files.view.grids, choice=choice,
                only_shapes=set(offending), make_runner=make_runner, rounds=rounds,
                title=f"after --fix pass {fix_pass}", noise_floor=noise_floor)
        except KeyboardInterrupt:
            raise fail("interrupted", 130) from None
        for line in missing:
            plain(line)
        if missing:
            raise fail(f"{len(missing)} shape(s) have no file after --fix; see above", 1)
        latest.update({(result.N, result.K): result for result in again})
        plain(f"after --fix pass {fix_pass}: " + summary_line(again))
    return list(latest.values())


def verify(
    device: DeviceOpt,
    model: Annotated[str, typer.Option(help="Model key from `tuner shapes list`.")],
    tp: Annotated[int | None, typer.Option(help="Tensor-parallel size (which shapes).")] = None,
    m: Annotated[str | None, typer.Option(
        "--m", show_default="the M grid of the shape's sweeps",
        help="Grid M values to check, comma-separated, or `all`: the sweeps' grid and vLLM's "
        "18 batch sizes (keys, midpoints and neighbours of keys are always checked).")] = None,
    rounds: Annotated[int | None, typer.Option(
        min=2, max=10_000, show_default=str(RETIME_ROUNDS),
        help="Interleaved rounds (chosen, default, chosen, default, ...) per M.")] = None,
    fix: Annotated[bool, typer.Option("--fix", help="Tune the slower or failed M values (a "
                                      "sweep of those M, like `tuner sweep`), then check them "
                                      "again. It first finishes unfinished sweeps of this "
                                      "device, model and TP, so an interrupted --fix resumes "
                                      "when run again.")] = False,
    allow_stale: Annotated[bool, typer.Option("--allow-stale", help="Also use winners measured "
                                              "with another kernel source or Triton "
                                              "major.minor.")] = False,
    allow_partial: Annotated[bool, typer.Option("--allow-partial", help="Also check files "
                                                "`tuner export` writes only with "
                                                "--allow-partial.")] = False,
    out_dtype: Annotated[OutDtype, typer.Option("--out-dtype", help="Output dtype of the "
                                                "trials and of the timed GEMM.")
                         ] = OutDtype.bfloat16,
    strategy: Annotated[strategy_names(), typer.Option(help="Search of the --fix trials.")
                        ] = FIX_STRATEGY,
    trials: Annotated[int, typer.Option(min=1, max=100_000, help="Configs per (N, K, M) of "
                                        "the --fix trials.")] = FIX_TRIALS,
    configs: ConfigsOpt = None,
    seed: Annotated[int, typer.Option(min=0, max=2**31 - 1, help="Seed of the random inputs "
                                      "and of the --fix search.")] = 0,
    interpreter_reps: InterpreterRepsOpt = 3,
    trial_timeout: TrialTimeoutOpt = None,
    lease: LeaseOpt = DEFAULT_LEASE_S,
    no_publish: NoPublishOpt = False,
    db: DbOpt = None,
) -> None:
    """Check that the config vLLM runs from this device's files is never slower
    than vLLM's default config, on the keys and between them.

    For each (N, K) of the model the file is the one `tuner export` writes. The
    M values checked: every key, the M grid of the sweeps that made the file
    (or --m's list; --m all adds vLLM's 18 batch sizes), the midpoint of each
    pair of neighbouring keys (where vLLM's pick switches), and key - 1 and
    key + 1, up to 4096 or the largest key. At each M the config of the
    nearest key (ties to the smaller key, as vLLM picks it) is checked against
    the float64 reference, then timed against the default config interleaved
    (A B A B ...). It is slower when its median exceeds the default's by more
    than the larger p80 - p20 spread of the two (or 30% on the interpreter).
    Where vLLM's pick is the default config itself nothing is timed.

    Runs on this machine's GPU matching --device, or on the CPU interpreter
    (--device interpreter: CPU timings).

    Exit codes: 0 every M ok; 1 some M slower or failed (named on stderr);
    2 bad input (unknown model or device, no file to check); 130 interrupted.
    """
    from db.engine import session_scope
    from tuner.inputs.shapes import UnknownModelError, load_shapes

    try:
        model_shapes = load_shapes(model, tp)
        choice = (None if m is None else M_ALL if m.strip().lower() == M_ALL
                  else parse_m_values(m))
    except (UnknownModelError, ValueError) as exc:
        raise fail(str(exc).strip("'\"")) from None
    candidates = load_configs(configs)
    if model_shapes.moe:  # one line, then the dense files (if the model has any)
        plain(f"note: MoE files are not verified yet ({model_shapes.moe_label})")
        if not model_shapes.shapes:
            return

    url, engine = open_db(db, must_exist=True)
    with session_scope(engine) as session:
        device_name = device_in_store(session, device)
    backend, _, visible = resolve_backend(device, None)
    _use_backend(backend, visible)  # before anything imports tuner.kernels.dense.kernel
    fixer = Fixer(engine, url, model_shapes, device_name=device_name, backend=backend,
                  visible=visible, strategy=strategy, trials=trials, configs=candidates,
                  seed=seed, out_dtype=out_dtype.value, options=RunOptions(
                      interpreter_reps=interpreter_reps, lease_s=lease,
                      trial_timeout_s=trial_timeout))
    if fix:
        fixer.finish_unfinished()
    read = store_files(engine, device_name, out_dtype=out_dtype.value, allow_stale=allow_stale,
                       allow_partial=allow_partial)
    files, grids = read.explained(), read.view.grids
    block_shape = tuple(model_shapes.block_shape)
    dense = [f for f in files.files if f.family == DEFAULT_FAMILY]
    have = {(f.N, f.K) for f in dense if f.block_shape == block_shape}
    if not have & set(model_shapes.shapes):
        reasons = "; ".join(f"{shape_label(item.N, item.K)}: {item.reason}"
                            for item in files.skipped if (item.N, item.K) in
                            set(model_shapes.shapes)) or "no trials of its shapes"
        raise fail(f"no file of {model_shapes.model} TP {model_shapes.tp} on {device_name} "
                   f"to check ({reasons})")
    make_runner = _runner_factory(backend, block_shape=block_shape, out_dtype=out_dtype.value,
                                  seed=seed, interpreter_reps=interpreter_reps)
    noise_floor = INTERPRETER_NOISE_FLOOR if backend == "interpreter" else 0.0
    if backend == "interpreter":
        plain(f"note: the interpreter's timings are CPU timings, not a GPU's: a pick is slower "
              f"only past {noise_floor:.0%} of the default's median (CPU noise) and the spread")
    plain(m_set_line(choice))
    try:
        results, missing = _verify_files(model_shapes, files, grids, choice=choice,
                                         only_shapes=None, make_runner=make_runner, rounds=rounds,
                                         title=f"on {device_name}", noise_floor=noise_floor)
    except KeyboardInterrupt:
        raise fail("interrupted", 130) from None
    for line in missing:
        plain(line)
    plain(summary_line(results))
    if fix:
        results = _fix(fixer, results, model_shapes, choice=choice, make_runner=make_runner,
                       rounds=rounds, noise_floor=noise_floor, read=lambda: store_files(
                           engine, device_name, out_dtype=out_dtype.value,
                           allow_stale=allow_stale, allow_partial=allow_partial))
        if not no_publish:  # the files --fix tuned are what a fleet downloads next
            publish_device(engine, device_name, reason="verify --fix", allow_stale=allow_stale,
                           allow_partial=allow_partial, out_dtype=out_dtype.value)
    lines = offending_lines(results)
    if lines:
        for line in lines:
            typer.echo(line, err=True)
        hint = "" if fix else "; `--fix` tunes these M values"
        raise fail(f"vLLM's pick is slower than its default config or failed at "
                   f"{sum(len(result.offending) for result in results)} M value(s){hint}", 1)
