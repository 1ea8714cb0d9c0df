"""`tuner compare` and `tuner verify`: a model's block-FP8 GEMMs timed on this machine's GPU
matching --device (or the CPU interpreter) from this device's files, each kernel first checked
against the float64 reference and then timed interleaved (`tuner.compare.versus.compare_point`,
one path for both). Each command's help is its function's docstring. Both time the Triton
kernel of the files they read: the installed vLLM's where vLLM is importable with the real
Triton, else the builtin (as `tuner sweep --kernel auto` resolves it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import astuple, dataclass
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
from tuner.compare import versus
from tuner.compare.backends import CandidateRunner, library_kernels
from tuner.core import REQUIRED_M, ComparisonStatus, OutDtype
from tuner.files.format import vllm_pick_key
from tuner.files.merge import dense_key
from tuner.inputs.shapes import ModelShapes, UnknownModelError, load_shapes
from tuner.kernels.config import KernelConfig
from tuner.kernels.registry import DEFAULT_FAMILY, get_family
from tuner.kernels.serving import TABLE
from tuner.kernels.shape import Shape, as_block_shape
from tuner.kernels.vllm_table import capability_number, table_dense_kernel
from tuner.measure.noise import RETIME_ROUNDS
from tuner.measure.runner import Problem
from tuner.run.plan import SweepRequest
from tuner.search.registry import DEFAULT_STRATEGY, DEFAULT_TRIALS

DEFAULT_M = ",".join(map(str, REQUIRED_M))
MOpt = Annotated[str, typer.Option("--m", help="M values to time, comma-separated.")]
RoundsOpt = Annotated[int, typer.Option(min=2, max=10_000, help="Interleaved rounds per M.")]
FixOpt = Annotated[
    bool, typer.Option(help="Sweep the slower or failed M, check again, then publish.")
]


def _or_fail(parse: Callable[..., Any], *args: Any) -> Any:
    """`parse(*args)`; an unknown model or a bad value exits 2 with one line."""
    try:
        return parse(*args)
    except (UnknownModelError, ValueError) as exc:
        raise fail(str(exc).strip("'\"")) from None


@dataclass
class _Bench:
    """What one `tuner compare` or `tuner verify` times with: the model, the store of --db, the
    device (`measuring_device`'s: its vLLM key, runner and CUDA_VISIBLE_DEVICES entries), the
    out dtype and the interleaved rounds; the Triton kernel is `--kernel auto`'s."""

    model_shapes: ModelShapes
    db: str | None
    device: str
    out_dtype: str
    rounds: int

    def __post_init__(self) -> None:
        self.url, self.store = open_db(self.db, must_exist=True)
        self.device_name, self.runner, self.visible = measuring_device(self.store, self.device)
        self.kernel, self.kernel_label = resolve_kernel_choice("auto")
        self.block_shape = as_block_shape(self.model_shapes.block_shape)
        self.on = "cuda" if self.runner.on_gpu else "cpu"

    def files(self, allow_stale: bool, allow_partial: bool):
        """The device's files now (`tuner.files.device.StoreFiles`)."""
        return store_files(
            self.store,
            self.device_name,
            out_dtype=self.out_dtype,
            allow_stale=allow_stale,
            allow_partial=allow_partial,
        )

    def make_runner(self, N: int, K: int, M: int, library=None) -> CandidateRunner:
        """The runner of (N, K, M): our Triton kernel, and `library`'s on the same inputs."""
        problem = Problem(M, N, K, self.block_shape, self.out_dtype, kernel=self.kernel)
        return CandidateRunner(problem, device=self.on, library=library or {})


def compare(
    device: DeviceOpt,
    model: ModelOpt,
    tp: TpOpt = None,
    m: MOpt = DEFAULT_M,
    rounds: RoundsOpt = RETIME_ROUNDS,
    out_dtype: OutDtypeOpt = OutDtype.bfloat16,
    db: DbOpt = None,
) -> None:
    """Time the kernels vLLM could run for a model's block-FP8 GEMMs on this device, and say
    whether `--linear-backend triton` with the tuned files beats vLLM's default kernel here.

    Per (N, K, M), on the same inputs, each kernel is checked against the float64 reference,
    then timed interleaved as verify does: our Triton kernel with vLLM's pick from the files
    (triton-tuned) and with vLLM's default config (triton-default), torch's block-scaled
    scaled_mm (torch-dequant-cpu on the interpreter) and, where vLLM is importable, its
    CUTLASS, DeepGEMM and Marlin kernels. Prints a table per shape (vLLM's default kernel
    marked *), then per M, for decode (M <= 32) and prefill (M >= 2048), whether tuned Triton
    beats vLLM's default; the run is stored (GET /devices/{device}/comparisons, the report).
    --device interpreter: CPU timings, to try the command, not to decide."""
    model_shapes: ModelShapes = _or_fail(load_shapes, model, tp)
    m_values = _or_fail(parse_m_values, m)
    run = _Compare(model_shapes, db, device, out_dtype.value, rounds)
    run.record(run.all(m_values))


@dataclass
class _Compare(_Bench):
    """One `tuner compare`: the library kernels timed beside ours, or why they are not."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.library, self.unavailable = library_kernels(self.on, self.block_shape or (128, 128))
        self.env = self.runner.environment(self.kernel, DEFAULT_FAMILY)
        # (N, K) -> vLLM's default kernel class there by the tuner's table; None where it
        # knows none (the interpreter's compute capability among them).
        capability = capability_number(self.env["compute_capability"]) or 0
        model_type = self.model_shapes.model_type
        self.defaults = {
            (N, K): table_dense_kernel(capability, N, K, self.out_dtype, model_type)
            for N, K in self.model_shapes.pairs()
        }

    def point(self, N: int, K: int, M: int, configs) -> versus.ComparePoint:
        """One (N, K, M) timed: the config vLLM picks from `configs` (the shape's file; None:
        none), vLLM's default config and the library kernels."""
        default = get_family(DEFAULT_FAMILY).default_config(Shape(N, K, self.block_shape), M)
        candidates = [versus.Candidate(versus.TRITON_DEFAULT, default)]
        missing = dict(self.unavailable)
        if configs:
            picked = KernelConfig.from_dict(configs[vllm_pick_key(configs, M)])
            candidates.insert(0, versus.Candidate(versus.TRITON_TUNED, picked))
        else:
            missing[versus.TRITON_TUNED] = "no file for this shape in the store"
        candidates += [versus.Candidate(name) for name in self.library]
        runner = self.make_runner(N, K, M, self.library)
        return versus.compare_point((N, K, M), runner, candidates, missing, rounds=self.rounds)

    def all(self, m_values) -> list[versus.ComparePoint]:
        """Every (shape, M) with the dense files of this device (partial ones too); each
        shape's table as it ends."""
        tuned = {
            (f.N, f.K): f.merged.configs
            for f in self.files(allow_stale=False, allow_partial=True).explained().files
            if f.key == dense_key(f.N, f.K, self.block_shape)
        }
        unit = "GPU timings" if self.runner.on_gpu else f"CPU timings ({self.runner.name})"
        points = []
        for N, K in self.model_shapes.pairs():
            shape_points = [self.point(N, K, M, tuned.get((N, K))) for M in m_values]
            _print_shape(N, K, shape_points, unit, self.defaults[(N, K)])
            points += shape_points
        for name, reason in sorted(self.unavailable.items()):
            plain(f"not timed: {name}: {reason}")
        return points

    def record(self, points: list[versus.ComparePoint]) -> None:
        """The verdict on `--linear-backend triton` against vLLM's default, printed and stored
        with every point."""
        lines = versus.flag_lines(points, self.defaults)
        for line in lines:
            plain(line)
        with repo.session_scope(self.store) as session:
            comparison_id = repo.record_comparison(
                session,
                device_name=self.device_name,
                environment_id=repo.get_or_create_environment(session, **self.env),
                model=self.model_shapes.model,
                tp=self.model_shapes.tp,
                out_dtype=self.out_dtype,
                verdicts=lines,
                points=[repo.PointRow(p.N, p.K, p.M, *astuple(t)) for p in points for t in p.times],
            )
        plain(f"stored as comparison {comparison_id} of {self.device_name}")


def _print_shape(
    N: int, K: int, points: list[versus.ComparePoint], unit: str, default: str | None
) -> None:
    """One shape's table, each column headed by its kernel's one name; vLLM's default kernel's
    (`default`, its class name) gets a *."""
    # A kernel is unavailable at every M of a shape or at none.
    shown = [t.backend for t in points[0].times if t.status is not ComparisonStatus.UNAVAILABLE]
    marked = versus.KERNEL_BACKENDS.get(default or "")
    cells = {
        (p.M, t.backend): f"{t.latency_us:.1f}" if t.latency_us is not None else t.status
        for p in points
        for t in p.times
    }
    rows = [[str(p.M), *(cells[p.M, n] for n in shown)] for p in points]
    columns = [Column("M"), *(Column(name + ("*" if name == marked else "")) for name in shown)]
    print_table(console, columns, rows, title=f"N={N},K={K}, latency_us, {unit}")
    if marked in shown:
        plain(f"* vLLM's default kernel here: {default} (from {TABLE})")
    notes = {p.M: t.note for p in points for t in p.times if t.backend == versus.TRITON_TUNED}
    plain(f"{versus.TRITON_TUNED}: " + "; ".join(f"M={M} {note}" for M, note in notes.items()))
    for point in points:
        for time in point.times:
            if time.status is ComparisonStatus.FAILED:
                plain(f"failed: {time.backend} at M={point.M}: {time.note}")


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
    """Check that the config vLLM runs from this device's files is never slower than vLLM's
    default config, on the keys and between them: at every key, the M grid of the sweeps that
    made the file, the midpoint of neighbouring keys (where vLLM's pick switches) and key +- 1,
    vLLM's pick (the nearest key, ties to the smaller) is checked against the float64
    reference, then timed interleaved with the default config; it is slower when its median
    exceeds the default's by more than the larger p80 - p20 spread (or 30% on the
    interpreter). --fix's files are published as the device's next release.

    Exit codes: 0 every M ok; 1 some M slower or failed (named on stderr); 2 bad input
    (unknown model or device, no file to check); 130 interrupted."""
    model_shapes: ModelShapes = _or_fail(load_shapes, model, tp)
    for name in [name for name in model_shapes.groups if name != DEFAULT_FAMILY]:
        title = get_family(name).report.short_title or name
        plain(f"note: {title} files are not verified yet ({model_shapes.family_label(name)})")
    candidates = load_configs(configs)
    if not model_shapes.of(DEFAULT_FAMILY):
        return
    run = _Verify(
        model_shapes, db, device, out_dtype.value, rounds, allow_stale, allow_partial, candidates
    )
    results = run.check(None, f"on {run.device_name}")
    plain(versus.summary_line(results))
    if fix:
        results = run.fix(results)
    offending = "; ".join(
        f"{versus.shape_label(r.N, r.K)} M={', '.join(map(str, r.offending))}"
        for r in results
        if r.offending
    )
    if offending:
        raise fail(f"vLLM's pick is slower than its default config or failed at {offending}", 1)


@dataclass
class _Verify(_Bench):
    """One `tuner verify`: which files it reads (--allow-stale, --allow-partial) and the
    --configs that --fix's sweeps search."""

    allow_stale: bool = False
    allow_partial: bool = False
    configs: tuple | None = None

    def check(self, only: set[tuple[int, int]] | None, title: str):
        """The results of the device's files now (shapes without a file said in a line each), each
        shape checked by `tuner.compare.versus.verify_shape`, with a table per shape. No file to
        check exits 2; an interrupt exits 130."""
        read = self.files(self.allow_stale, self.allow_partial)
        try:
            planned, missing = versus.plan(
                self.model_shapes, read.explained(), read.view.grids, only
            )
        except ValueError as exc:
            raise fail(f"{self.device_name}: {exc}") from None
        noise = 0.0 if self.runner.on_gpu else versus.INTERPRETER_NOISE_FLOOR
        results = []
        try:
            for s in planned:
                label = versus.shape_label(s.shape.N, s.shape.K)
                keys = ", ".join(map(str, s.configs))
                plain(f"{label}: keys {keys}; checking {len(s.m_points)} M values")
                result = versus.verify_shape(
                    s, self.make_runner, rounds=self.rounds, noise_floor=noise
                )
                print_shape_table(result, f"{label} {title}")
                results.append(result)
        except KeyboardInterrupt:
            raise fail("interrupted", 130) from None
        for line in missing:
            plain(line)
        return results

    def fix(self, results: list[versus.ShapeVerification]) -> list[versus.ShapeVerification]:
        """`--fix`: a sweep of each shape's offending M (`tune`), the shapes it touched checked
        again in full (new keys bring new midpoints), then the device's files published as its
        next release (what a fleet downloads next); the latest result of every shape."""
        offending = {(r.N, r.K): r.offending for r in results if r.offending}
        latest = {(r.N, r.K): r for r in results}
        if offending:
            self.tune(offending)
            again = self.check(set(offending), "after --fix")
            latest.update({(r.N, r.K): r for r in again})
            plain("after --fix: " + versus.summary_line(again))
        publish_device(
            self.store,
            self.device_name,
            reason="verify --fix",
            allow_stale=self.allow_stale,
            allow_partial=self.allow_partial,
            out_dtype=self.out_dtype,
        )
        return list(latest.values())

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
            what = f"--fix of {versus.shape_label(N, K)}"
            _plan_and_run(self.store, self.url, request, what, self.runner, self.visible)


def print_shape_table(result: versus.ShapeVerification, title: str) -> None:
    """One row per checked M: vLLM's key and config there, both medians, speedup, verdict."""

    names = ("M", "key", "config", "chosen_us", "default_us", "noise_us", "speedup", "verdict")
    columns = [
        Column(name, text=name in ("config", "verdict"), optional=name == "noise_us")
        for name in names
    ]
    verdicts = {
        versus.Verdict.FAILED: "[red]failed[/red]: {}",
        versus.Verdict.SLOWER: "[red]slower[/red]",
    }
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
