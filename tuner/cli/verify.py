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

Exit codes: 0 every M ok (nothing timed included); 1 some M slower or failed (named on
stderr); 2 bad input (unknown model or device, no file to check); 130 interrupted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import typer

from db import repo
from tuner.cli.arguments import load_configs, parse_m_values
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
from tuner.compare.verify import ShapeVerification, Verdict, shape_label
from tuner.core import OutDtype
from tuner.inputs.shapes import ModelShapes, UnknownModelError, load_shapes
from tuner.kernels.registry import DEFAULT_FAMILY, get_family
from tuner.kernels.shape import as_block_shape
from tuner.measure.noise import REP_S, RETIME_ROUNDS, WARMUP_S
from tuner.measure.runner import Problem
from tuner.run.plan import SweepRequest, space_name
from tuner.search.registry import DEFAULT_STRATEGY, DEFAULT_TRIALS

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
    int, typer.Option(min=2, max=10_000, help="Interleaved rounds (A B A B ...) per M.")
]
FixOpt = Annotated[
    bool,
    typer.Option(
        "--fix",
        help="Tune the slower or failed M (a sweep of them, with the search of the sweeps that "
        "made the files), check again, then publish.",
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
    choice: core.MChoice
    out_dtype: str
    rounds: int
    allow: tuple[bool, bool]  # --allow-stale, --allow-partial
    configs: tuple | None = None

    def __post_init__(self) -> None:
        self.device_name, self.runner, self.visible = self.device
        self.kernel, self.kernel_label = resolve_kernel_choice("auto")
        self.space = space_name(self.configs, None, self.kernel_label)
        self.block_shape = as_block_shape(self.model_shapes.block_shape)

    def files(self):
        """The device's files now (`tuner.files.device.StoreFiles`)."""
        stale, partial = self.allow
        return store_files(
            self.store,
            self.device_name,
            out_dtype=self.out_dtype,
            allow_stale=stale,
            allow_partial=partial,
        )

    def make_runner(self, N: int, K: int, M: int):
        """The problem runner of (N, K, M) on this process's device."""
        problem = Problem(M, N, K, self.block_shape, self.out_dtype, kernel=self.kernel)
        return self.runner.problem_runner(problem, seed=0, warmup_s=WARMUP_S, rep_s=REP_S)

    def first_check(self) -> list[ShapeVerification]:
        """The check before any --fix, with the shapes without a file and the summary. No file
        to check exits 2."""
        no_file = core.no_file_line(self.model_shapes, self.files().explained(), self.device_name)
        if no_file is not None:
            raise fail(no_file)
        results, missing = self.check(None, f"on {self.device_name}")
        for line in missing:
            plain(line)
        plain(core.summary_line(results))
        return results

    def check(self, only: set[tuple[int, int]] | None, title: str):
        """(results, lines of shapes without a file) of the files now, each shape checked by
        `tuner.compare.verify.verify_shape`, with a table per shape. Exits 130 when
        interrupted."""
        read = self.files()
        planned, missing = core.plan(
            self.model_shapes, read.explained(), read.view.grids, self.choice, only
        )
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
        return results, missing

    def run(self, shapes, m_values, search: tuple[str, int, int], what: str) -> None:
        """Plan and run the sweep of `shapes` at `m_values` with `search` (strategy, trials,
        seed), as `tuner sweep` does."""
        strategy, trials, seed = search
        request = SweepRequest(
            device_name=self.device_name,
            model=self.model_shapes.model,
            tp=self.model_shapes.tp,
            shapes=tuple(shapes),
            block_shape=self.block_shape,
            m_values=tuple(m_values),
            strategy=strategy,
            trials=trials,
            seed=seed,
            out_dtype=self.out_dtype,
            configs=self.configs,
            kernel=self.kernel,
            kernel_label=self.kernel_label,
        )
        _plan_and_run(
            self.store,
            self.url,
            request,
            what,
            runner=self.runner,
            visible=self.visible,
        )

    def tune(self, offending: dict[tuple[int, int], list[int]]) -> None:
        """One sweep per set of offending M, over the shapes that share it, with the search of
        the latest sweep of this config space (`tuner sweep`'s defaults where there is none)."""
        key = (self.device_name, self.model_shapes.model, self.model_shapes.tp, self.space)
        with repo.session_scope(self.store) as session:
            made = [
                row
                for row in repo.list_sweeps(session)
                if (row.device_name, row.model, row.tp, row.space) == key
            ]
        search = (
            (made[-1].strategy, made[-1].budget, made[-1].seed)
            if made
            else (DEFAULT_STRATEGY, DEFAULT_TRIALS, 0)
        )
        groups: dict[tuple[int, ...], list[tuple[int, int]]] = {}
        for shape, m_values in sorted(offending.items()):
            groups.setdefault(tuple(m_values), []).append(shape)
        for group_m, shapes in sorted(groups.items()):
            what = f"--fix of {' '.join(shape_label(N, K) for N, K in shapes)}"
            self.run(shapes, group_m, search, what)


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


def _model(model: str, tp: int | None, m: str | None) -> tuple[ModelShapes, core.MChoice]:
    """The model's shapes and `--m`'s choice; one note line per family whose files are not
    verified yet. A bad value exits 2 with one line."""
    try:
        model_shapes = load_shapes(model, tp)
        word = None if m is None else m.strip().lower()
        choice = word if word in (None, core.M_ALL) else parse_m_values(m or "")
    except (UnknownModelError, ValueError) as exc:
        raise fail(str(exc).strip("'\"")) from None
    for name in model_shapes.groups:
        if name != DEFAULT_FAMILY:
            plain(
                f"note: {get_family(name).report.short_title or name} files are not verified "
                f"yet ({model_shapes.family_label(name)})"
            )
    return model_shapes, choice


def verify(
    device: DeviceOpt,
    model: ModelOpt,
    tp: TpOpt = None,
    m: MOpt = None,
    rounds: RoundsOpt = RETIME_ROUNDS,
    fix: FixOpt = False,
    configs: ConfigsOpt = None,
    allow_stale: AllowStaleOpt = False,
    allow_partial: AllowPartialOpt = False,
    out_dtype: OutDtypeOpt = OutDtype.bfloat16,
    db: DbOpt = None,
) -> None:
    """`tuner verify`: its help is this module's docstring (`app.command(help=...)`); --fix's
    files are published as the device's next release (what a fleet downloads next)."""
    model_shapes, choice = _model(model, tp, m)
    candidates = load_configs(configs)
    if not model_shapes.of(DEFAULT_FAMILY):
        return
    url, store = open_db(db, must_exist=True)
    found = measuring_device(store, device)
    allow = (allow_stale, allow_partial)
    dtype = out_dtype.value
    run = _Verify(store, url, model_shapes, found, choice, dtype, rounds, allow, candidates)
    results = run.first_check()
    if fix:
        try:
            results = core.fix_passes(
                results, run.tune, lambda only, n: run.check(only, f"after --fix pass {n}"), plain
            )
        except ValueError as exc:
            raise fail(str(exc), 1) from None
        publish_device(
            store,
            run.device_name,
            reason="verify --fix",
            allow_stale=allow_stale,
            allow_partial=allow_partial,
            out_dtype=dtype,
        )
    lines = core.offending_lines(results)
    for line in lines:
        typer.echo(line, err=True)
    if lines:
        hint = "" if fix else "; `--fix` tunes these M values"
        count = sum(len(result.offending) for result in results)
        what = f"slower than its default config or failed at {count} M value(s){hint}"
        raise fail(f"vLLM's pick is {what}", 1)
