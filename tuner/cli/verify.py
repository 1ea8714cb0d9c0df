"""`tuner verify`: time the config vLLM runs from a device's files against its default, on and
off the keys; `--fix` tunes the M values where it loses. The store is read here; the flow is
tuner.compare.verify_run's and the timing tuner.compare.verify's. Fused-MoE files are not
verified yet (one line says so)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tuner.cli.arguments import load_configs, parse_m_values
from tuner.cli.devices import measuring_device
from tuner.cli.engines import EngineVersionOpt, clamp_lines
from tuner.cli.errors import fail
from tuner.cli.options import (
    DEFAULT_STRATEGY_NAME,
    ConfigsOpt,
    DbOpt,
    DeviceOpt,
    EngineName,
    EngineOpt,
    InterpreterRepsOpt,
    LeaseOpt,
    ModelOpt,
    TpOpt,
    TrialTimeoutOpt,
    strategy_names,
)
from tuner.cli.output import plain
from tuner.cli.publish import NoPublishOpt, publish_device
from tuner.cli.store import open_db, store_files
from tuner.core import OutDtype
from tuner.measure.noise import RETIME_ROUNDS
from tuner.run.options import DEFAULT_LEASE_S
from tuner.search.defaults import DEFAULT_TRIALS

# The check's modules (tuner.compare.*, tuner.inputs.shapes and the kernels they import) are
# imported where they run, not when the CLI starts (`tuner --help` stays quick).
if TYPE_CHECKING:
    from tuner.cli.verify_fix import Fixer
    from tuner.compare.verify import RunnerFactory, ShapeVerification
    from tuner.compare.verify_run import MChoice, VerifyRun
    from tuner.inputs.shapes import ModelShapes
    from tuner.measure.runners import Runner

# Search of the `--fix` trials: `tuner sweep`'s defaults.
FIX_STRATEGY = DEFAULT_STRATEGY_NAME  # what `tuner sweep` runs by default
FIX_TRIALS = DEFAULT_TRIALS

# The options of `tuner verify` (beside the shared ones of tuner.cli.options).
MOpt = Annotated[
    str | None,
    typer.Option(
        "--m",
        show_default="the M grid of the shape's sweeps",
        help="Grid M values to check, comma-separated, or `all`: the sweeps' grid and vLLM's "
        "18 batch sizes (keys, midpoints and neighbours of keys are always checked).",
    ),
]
RoundsOpt = Annotated[
    int | None,
    typer.Option(
        min=2,
        max=10_000,
        show_default=str(RETIME_ROUNDS),
        help="Interleaved rounds (chosen, default, chosen, default, ...) per M.",
    ),
]
FixOpt = Annotated[
    bool,
    typer.Option(
        "--fix",
        help="Tune the slower or failed M values (a "
        "sweep of those M, like `tuner sweep`), then check them "
        "again. It first finishes unfinished sweeps of this "
        "device, model and TP, so an interrupted --fix resumes "
        "when run again.",
    ),
]
AllowStaleOpt = Annotated[
    bool,
    typer.Option(
        "--allow-stale",
        help="Also use winners measured with another kernel source or Triton major.minor.",
    ),
]
AllowPartialOpt = Annotated[
    bool,
    typer.Option(
        "--allow-partial", help="Also check files `tuner export` writes only with --allow-partial."
    ),
]
VerifyOutDtypeOpt = Annotated[
    OutDtype, typer.Option("--out-dtype", help="Output dtype of the trials and of the timed GEMM.")
]
SeedOpt = Annotated[
    int,
    typer.Option(min=0, max=2**31 - 1, help="Seed of the random inputs and of the --fix search."),
]
FixTrialsOpt = Annotated[
    int, typer.Option(min=1, max=100_000, help="Configs per (N, K, M) of the --fix trials.")
]


def _runner_factory(
    runner: Runner,
    *,
    block_shape: tuple[int, int] | None,
    out_dtype: str,
    seed: int,
    kernel: str = "builtin",
) -> RunnerFactory:
    """(N, K, M) -> `runner`'s problem runner (tuner.measure.runner.KernelRunner) on this
    process's device, timing `kernel`'s ("builtin" or "vllm") Triton kernel (tests replace
    this)."""
    from tuner.measure.runner import Problem
    from tuner.measure.timing import REP_S, WARMUP_S

    def make(N: int, K: int, M: int):
        problem = Problem(M, N, K, block_shape, out_dtype, kernel=kernel)
        return runner.problem_runner(problem, seed=seed, warmup_s=WARMUP_S, rep_s=REP_S)

    return make


def _parse(model: str, tp: int | None, m: str | None) -> tuple[ModelShapes, MChoice]:
    """The model's shapes and `--m`'s choice; a bad value exits 2 with one line."""
    from tuner.compare.verify_run import M_ALL
    from tuner.inputs.shapes import UnknownModelError, load_shapes

    try:
        model_shapes = load_shapes(model, tp)
        choice = None if m is None else M_ALL if m.strip().lower() == M_ALL else parse_m_values(m)
    except (UnknownModelError, ValueError) as exc:
        raise fail(str(exc).strip("'\"")) from None
    return model_shapes, choice


def _verify_run(
    model_shapes: ModelShapes,
    choice: MChoice,
    kernel: str,
    *,
    runner: Runner,
    out_dtype: str,
    seed: int,
    rounds: int | None,
) -> VerifyRun:
    """The check on this process's device, timing `kernel`'s ("builtin" or "vllm") Triton
    kernel; on the interpreter, a note on its noise floor."""
    from tuner.compare.verify import INTERPRETER_NOISE_FLOOR
    from tuner.compare.verify_run import VerifyRun
    from tuner.kernels.shape import as_block_shape

    make_runner = _runner_factory(
        runner,
        block_shape=as_block_shape(model_shapes.block_shape),
        out_dtype=out_dtype,
        seed=seed,
        kernel=kernel,
    )
    noise_floor = 0.0 if runner.on_gpu else INTERPRETER_NOISE_FLOOR
    if not runner.on_gpu:
        plain(
            f"note: the interpreter's timings are CPU timings, not a GPU's: a pick is slower "
            f"only past {noise_floor:.0%} of the default's median (CPU noise) and the spread"
        )
    return VerifyRun(model_shapes, choice, make_runner, rounds=rounds, noise_floor=noise_floor)


def _check(
    run: VerifyRun, read, *, only_shapes: set[tuple[int, int]] | None, title: str
) -> tuple[list[ShapeVerification], list[str]]:
    """`run` over the files of `read` (`tuner.files.device.StoreFiles`) with a progress bar on
    stderr counting the timed M; exits 130 when interrupted."""
    from tuner.cli.verify_show import shown

    try:
        planned, missing = run.plan(read.explained(), read.view.grids, only_shapes=only_shapes)
        if planned and not any(shape.timed for shape in planned):
            return run.check(planned, _Unshown()), missing
        with shown(planned, title=title) as observer:
            return run.check(planned, observer), missing
    except KeyboardInterrupt:
        raise fail("interrupted", 130) from None


class _Unshown:
    """The observer of a check where nothing is timed: no bar, no tables (the one line of
    `nothing_timed_line` says what there is to say)."""

    def shape_started(self, shape) -> None:
        pass

    def point_done(self, shape, point) -> None:
        pass

    def shape_done(self, result) -> None:
        pass


def nothing_timed_line(results: Sequence[ShapeVerification], device_name: str) -> str | None:
    """The line that says verify had nothing to time: at every checked M vLLM's pick is its
    default config, the baseline itself (the sweeps found nothing faster); None when some M
    was timed."""
    points = [point for result in results for point in result.points]
    if not points or any(point.timed for point in points):
        return None
    return (
        f"nothing to time: at all {len(points)} M value(s) of {len(results)} shape(s) "
        f"vLLM's pick from {device_name}'s files is its default config, the baseline "
        "itself (the sweeps found no faster config there; `tuner winners` shows them); "
        "nothing is slower"
    )


def _fix(
    run: VerifyRun, fixer: Fixer, results: list[ShapeVerification], read
) -> list[ShapeVerification]:
    """`--fix`'s passes (`tuner.compare.verify_run.fix_passes`); a touched shape without a
    file afterwards exits 1."""
    from tuner.compare.verify_run import MissingAfterFix, fix_passes

    try:
        return fix_passes(
            results,
            tune=fixer.tune,
            say=plain,
            check_again=lambda shapes, n: _check(
                run, read(), only_shapes=shapes, title=f"after --fix pass {n}"
            ),
        )
    except MissingAfterFix as exc:
        raise fail(str(exc), 1) from None


def _exit_on_offending(results: Sequence[ShapeVerification], fix: bool) -> None:
    """Name each shape's slower or failed M on stderr and exit 1, if there are any."""
    from tuner.compare.verify_run import offending_lines

    lines = offending_lines(results)
    if lines:
        for line in lines:
            typer.echo(line, err=True)
        hint = "" if fix else "; `--fix` tunes these M values"
        raise fail(
            f"vLLM's pick is slower than its default config or failed at "
            f"{sum(len(result.offending) for result in results)} M value(s){hint}",
            1,
        )


def _inputs(
    model: str, tp: int | None, m: str | None, configs: Path | None
) -> tuple[ModelShapes | None, MChoice, tuple | None]:
    """(model shapes, --m's choice, --configs' configs); one note line per family whose files
    are not verified yet, and None for the shapes when the model has none of the default
    family (nothing to verify). A bad value exits 2 with one line."""
    from tuner.kernels.registry import DEFAULT_FAMILY, get_family

    model_shapes, choice = _parse(model, tp, m)
    candidates = load_configs(configs)
    # one line per other family, then the default family's files (if the model has any)
    for name in model_shapes.groups:
        if name != DEFAULT_FAMILY:
            plain(
                f"note: {get_family(name).report.short_title or name} files are not verified "
                f"yet ({model_shapes.family_label(name)})"
            )
    if not model_shapes.of(DEFAULT_FAMILY):
        return None, choice, candidates
    return model_shapes, choice, candidates


@dataclass(frozen=True)
class _DeviceFiles:
    """A device's files in the store as verify reads them (`tuner.cli.store.store_files`) and
    as `--fix` publishes them (`tuner.cli.publish.publish_device`)."""

    store: Any
    device_name: str
    out_dtype: str
    allow_stale: bool
    allow_partial: bool

    def read(self):
        """The device's files now (`tuner.files.device.StoreFiles`)."""
        return store_files(
            self.store,
            self.device_name,
            out_dtype=self.out_dtype,
            allow_stale=self.allow_stale,
            allow_partial=self.allow_partial,
        )

    def first(self, model_shapes: ModelShapes):
        """The files before any check; one line, exit 2, when the model has none here."""
        from tuner.compare.verify_run import no_file_line

        read = self.read()
        no_file = no_file_line(model_shapes, read.explained(), self.device_name)
        if no_file is not None:
            raise fail(no_file)
        return read

    def publish(self) -> None:
        """Publish the files `--fix` tuned as a new release."""
        publish_device(
            self.store,
            self.device_name,
            reason="verify --fix",
            allow_stale=self.allow_stale,
            allow_partial=self.allow_partial,
            out_dtype=self.out_dtype,
        )


def _first_check(
    run: VerifyRun,
    first,
    choice: MChoice,
    device_name: str,
    engine_name: EngineName,
    engine_version: str | None,
) -> list[ShapeVerification]:
    """The check before any `--fix`: the M set's line, SGLang's rewrites (--engine sglang),
    the tables, the files missing and the summary line."""
    from tuner.compare.verify_run import m_set_line, summary_line

    plain(m_set_line(choice))
    if engine_name == EngineName.sglang:
        for line in clamp_lines(
            device_name,
            engine_version,
            [(f.file_name, f.merged.configs) for f in first.files.files],
        ):
            plain(f"warning: {line}")
    results, missing = _check(run, first, only_shapes=None, title=f"on {device_name}")
    for line in missing:
        plain(line)
    nothing = nothing_timed_line(results, device_name)
    plain(nothing if nothing is not None else summary_line(results))
    return results


FIX_STRATEGY_HELP = "Search of the --fix trials."


def verify(
    device: DeviceOpt,
    model: ModelOpt,
    tp: TpOpt = None,
    m: MOpt = None,
    rounds: RoundsOpt = None,
    fix: FixOpt = False,
    allow_stale: AllowStaleOpt = False,
    allow_partial: AllowPartialOpt = False,
    out_dtype: VerifyOutDtypeOpt = OutDtype.bfloat16,
    strategy: Annotated[
        strategy_names(),  # type: ignore[valid-type]  # Literal built at run time
        typer.Option(help=FIX_STRATEGY_HELP),
    ] = FIX_STRATEGY,
    trials: FixTrialsOpt = FIX_TRIALS,
    configs: ConfigsOpt = None,
    seed: SeedOpt = 0,
    interpreter_reps: InterpreterRepsOpt = 3,
    trial_timeout: TrialTimeoutOpt = None,
    lease: LeaseOpt = DEFAULT_LEASE_S,
    no_publish: NoPublishOpt = False,
    db: DbOpt = None,
    engine_name: EngineOpt = EngineName.vllm,
    engine_version: EngineVersionOpt = None,
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
    (--device interpreter: CPU timings). With --engine sglang, one line per file first names
    the entries SGLang rewrites as it reads them (BLOCK_SIZE_K raised to block_k): there it
    runs another config than the one checked.

    Where every pick is the default (nothing to time), one line says so instead of the
    tables, and the exit code is 0: nothing is slower than the default.

    Exit codes: 0 every M ok (nothing timed included); 1 some M slower or failed (named on
    stderr);
    2 bad input (unknown model or device, no file to check); 130 interrupted.
    """
    from tuner.cli.verify_fix import Fixer
    from tuner.run.options import RunOptions

    model_shapes, choice, candidates = _inputs(model, tp, m, configs)
    if model_shapes is None:
        return
    url, store = open_db(db, must_exist=True)
    device_name, runner, visible = measuring_device(store, device, interpreter_reps)
    fixer = Fixer(
        store,
        url,
        model_shapes,
        device_name=device_name,
        runner=runner,
        visible=visible,
        strategy=strategy,
        trials=trials,
        configs=candidates,
        seed=seed,
        out_dtype=out_dtype.value,
        options=RunOptions(lease, trial_timeout),
    )
    if fix:
        fixer.finish_unfinished()
    files = _DeviceFiles(store, device_name, out_dtype.value, allow_stale, allow_partial)
    first = files.first(model_shapes)
    run = _verify_run(
        model_shapes,
        choice,
        fixer.kernel,
        runner=runner,
        out_dtype=out_dtype.value,
        seed=seed,
        rounds=rounds,
    )
    results = _first_check(run, first, choice, device_name, engine_name, engine_version)
    if fix:
        results = _fix(run, fixer, results, files.read)
        if not no_publish:  # the files --fix tuned are what a fleet downloads next
            files.publish()
    _exit_on_offending(results, fix)
