"""Check that the config vLLM runs from this device's files is never slower
than vLLM's default config, on the keys and between them.

For each (N, K) of the model the file is the one `tuner export` writes. The
M values checked: every key, the M grid of the sweeps that made the file,
the midpoint of each
pair of neighbouring keys (where vLLM's pick switches), and key - 1 and
key + 1, up to 4096 or the largest key. At each M the config of the
nearest key (ties to the smaller key, as vLLM picks it) is checked against
the float64 reference, then timed against the default config interleaved
(A B A B ...). It is slower when its median exceeds the default's by more
than the larger p80 - p20 spread of the two (or 30% on the interpreter).
Where vLLM's pick is the default config itself nothing is timed.

Runs on this machine's GPU matching --device, or on the CPU interpreter
(--device interpreter: CPU timings).

Exit codes: 0 every M ok (nothing timed included); 1 some M slower or failed (named on
stderr); 2 bad input (unknown model or device, no file to check); 130 interrupted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import typer

from tuner.cli.arguments import load_configs
from tuner.cli.devices import measuring_device, resolve_kernel_choice
from tuner.cli.errors import fail
from tuner.cli.export import AllowPartialOpt, AllowStaleOpt, publish_device
from tuner.cli.options import (
    ConfigsOpt,
    DbOpt,
    DeviceOpt,
    ModelOpt,
    OutDtypeOpt,
    TpOpt,
)
from tuner.cli.output import console, plain
from tuner.cli.store import open_db, store_files
from tuner.cli.sweep import _plan_and_run
from tuner.cli.tables import Column, print_table
from tuner.compare import verify as core
from tuner.compare.backends import CandidateRunner
from tuner.compare.verify import ShapeVerification, Verdict, shape_label
from tuner.core import OutDtype
from tuner.inputs.shapes import ModelShapes, UnknownModelError, load_shapes
from tuner.kernels.registry import DEFAULT_FAMILY, get_family
from tuner.kernels.shape import as_block_shape
from tuner.measure.noise import RETIME_ROUNDS
from tuner.measure.runner import Problem
from tuner.run.plan import SweepRequest
from tuner.search.registry import DEFAULT_STRATEGY, DEFAULT_TRIALS

RoundsOpt = Annotated[
    int, typer.Option(min=2, max=10_000, help="Interleaved rounds (A B A B ...) per M.")
]
FixOpt = Annotated[
    bool,
    typer.Option(
        "--fix",
        help="Tune the slower or failed M (a sweep of them, with `tuner sweep`'s default "
        "search), check again, then publish.",
    ),
]


@dataclass
class _Verify:
    """One `tuner verify` run: where its files come from, what times them, how --fix tunes.
    Its kernel is vLLM's where vLLM is importable (whose trials' files are then read), as
    `tuner sweep --kernel auto` resolves it."""

    store: Any
    url: str
    model_shapes: ModelShapes
    device: tuple[str, Any, list[str | None]]  # `measuring_device`'s
    out_dtype: str
    rounds: int
    allow: tuple[bool, bool]  # --allow-stale, --allow-partial
    configs: tuple | None = None

    def __post_init__(self) -> None:
        self.device_name, self.runner, self.visible = self.device
        self.kernel, self.kernel_label = resolve_kernel_choice("auto")
        self.block_shape = as_block_shape(self.model_shapes.block_shape)

    def make_runner(self, N: int, K: int, M: int):
        """The runner of (N, K, M) on this process's device, as `tuner compare` times with."""
        problem = Problem(M, N, K, self.block_shape, self.out_dtype, kernel=self.kernel)
        device = "cuda" if self.runner.on_gpu else "cpu"
        return CandidateRunner(problem, device=device, library={})

    def check(self, only: set[tuple[int, int]] | None, title: str):
        """(results, lines of shapes without a file) of the device's files now, each shape
        checked by `tuner.compare.verify.verify_shape`, with a table per shape. No file to
        check exits 2; an interrupt exits 130."""
        stale, partial = self.allow
        read = store_files(
            self.store,
            self.device_name,
            out_dtype=self.out_dtype,
            allow_stale=stale,
            allow_partial=partial,
        )
        try:
            planned, missing = core.plan(self.model_shapes, read.explained(), read.view.grids, only)
        except ValueError as exc:
            raise fail(f"{self.device_name}: {exc}") from None
        noise = 0.0 if self.runner.on_gpu else core.INTERPRETER_NOISE_FLOOR
        results = []
        try:
            for s in planned:
                label = shape_label(s.shape.N, s.shape.K)
                keys = ", ".join(map(str, s.configs))
                plain(f"{label}: keys {keys}; checking {len(s.m_points)} M values")
                results.append(
                    core.verify_shape(
                        s.shape,
                        s.configs,
                        s.m_points,
                        self.make_runner,
                        rounds=self.rounds,
                        noise_floor=noise,
                    )
                )
                print_shape_table(results[-1], f"{label} {title}")
        except KeyboardInterrupt:
            raise fail("interrupted", 130) from None
        for line in missing:
            plain(line)
        return results, missing

    def fix(self, results: list[ShapeVerification]) -> list[ShapeVerification]:
        """`--fix`: `core.fix_passes` with this run's sweeps and checks, then the device's files
        published as its next release (what a fleet downloads next)."""
        try:
            results = core.fix_passes(
                results, self.tune, lambda only, n: self.check(only, f"after --fix pass {n}"), plain
            )
        except ValueError as exc:
            raise fail(str(exc), 1) from None
        stale, partial = self.allow
        publish_device(
            self.store,
            self.device_name,
            reason="verify --fix",
            allow_stale=stale,
            allow_partial=partial,
            out_dtype=self.out_dtype,
        )
        return results

    def tune(self, offending: dict[tuple[int, int], list[int]]) -> None:
        """`--fix`'s sweep of each shape at its offending M, planned and run as `tuner sweep`
        with its default search does."""
        for (N, K), m_values in sorted(offending.items()):
            request = SweepRequest(
                device_name=self.device_name,
                model=self.model_shapes.model,
                tp=self.model_shapes.tp,
                shapes=((N, K),),
                block_shape=self.block_shape,
                m_values=tuple(m_values),
                strategy=DEFAULT_STRATEGY,
                trials=DEFAULT_TRIALS,
                seed=0,
                out_dtype=self.out_dtype,
                configs=self.configs,
                kernel=self.kernel,
                kernel_label=self.kernel_label,
            )
            what = f"--fix of {shape_label(N, K)}"
            _plan_and_run(
                self.store,
                self.url,
                request,
                what,
                no_run=False,
                runner=self.runner,
                visible=self.visible,
            )


def print_shape_table(result: ShapeVerification, title: str) -> None:
    """One row per checked M: vLLM's key and config there, both medians, speedup, verdict."""
    names = ("M", "key", "config", "chosen_us", "default_us", "noise_us", "speedup", "verdict")
    columns = [
        Column(name, text=name in ("config", "verdict"), optional=name == "noise_us")
        for name in names
    ]
    verdicts = {Verdict.FAILED: "[red]failed[/red]: {}", Verdict.SLOWER: "[red]slower[/red]"}
    rows = [
        [
            str(point.M),
            str(point.key),
            point.config.short(),
            *(
                "-" if us is None else f"{us:.1f}"
                for us in (point.chosen_us, point.default_us, point.noise_us)
            ),
            "-" if point.speedup is None else f"{point.speedup:.2f}x",
            verdicts.get(point.verdict, "ok" if point.timed else "ok (default)").format(
                point.error
            ),
        ]
        for point in result.points
    ]
    print_table(console, columns, rows, title=title)


def _model(model: str, tp: int | None) -> ModelShapes:
    """The model's shapes; one note line per family whose files are not verified yet. A bad
    model exits 2 with one line."""
    try:
        model_shapes = load_shapes(model, tp)
    except (UnknownModelError, ValueError) as exc:
        raise fail(str(exc).strip("'\"")) from None
    for name in model_shapes.groups:
        if name != DEFAULT_FAMILY:
            plain(
                f"note: {get_family(name).report.short_title or name} files are not verified "
                f"yet ({model_shapes.family_label(name)})"
            )
    return model_shapes


def verify(
    device: DeviceOpt,
    model: ModelOpt,
    tp: TpOpt = None,
    rounds: RoundsOpt = RETIME_ROUNDS,
    fix: FixOpt = False,
    configs: ConfigsOpt = None,
    allow_stale: AllowStaleOpt = False,
    allow_partial: AllowPartialOpt = False,
    out_dtype: OutDtypeOpt = OutDtype.bfloat16,
    db: DbOpt = None,
) -> None:
    """`tuner verify`: its help is this module's docstring (`app.command(help=...)`)."""
    model_shapes = _model(model, tp)
    candidates = load_configs(configs)
    if not model_shapes.of(DEFAULT_FAMILY):
        return
    url, store = open_db(db, must_exist=True)
    found = measuring_device(store, device)
    allow = (allow_stale, allow_partial)
    dtype = out_dtype.value
    run = _Verify(store, url, model_shapes, found, dtype, rounds, allow, candidates)
    results, _ = run.check(None, f"on {run.device_name}")
    plain(core.summary_line(results))
    if fix:
        results = run.fix(results)
    lines = core.offending_lines(results)
    for line in lines:
        typer.echo(line, err=True)
    if lines:
        hint = "" if fix else "; `--fix` tunes these M values"
        count = sum(len(result.offending) for result in results)
        what = f"slower than its default config or failed at {count} M value(s){hint}"
        raise fail(f"vLLM's pick is {what}", 1)
