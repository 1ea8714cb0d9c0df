"""Time the kernels vLLM could run for a model's block-FP8 GEMMs, and say
whether `--linear-backend triton` with the tuned files pays off.

Per (N, K, M), on one GPU and with the same inputs: our Triton kernel with
the config vLLM would pick from this device's files (triton-tuned) and with
vLLM's default config (triton-default), torch.nn.functional.scaled_mm with
block-wise scales (torch-scaled_mm; on the interpreter, torch-dequant-cpu),
vLLM's CUTLASS and DeepGEMM ops when vLLM is importable (vllm-cutlass,
vllm-deepgemm), and Marlin (sm89's default) through vLLM's own kernel
class (vllm-marlin; its weight processing done before timing).
Each kernel has that one name in the tables, the summary, the stored run
and the report. Each is first checked against the float64
reference; those that pass are timed interleaved as verify does. A kernel
that cannot run here is shown as unavailable with the reason.

Prints a table per shape, vLLM's default kernel on this GPU marked with *
(the tuner's table of vLLM 0.33.0, per shape and model type), then per M,
for decode (M <= 32) and for prefill (M >= 2048), whether
`--linear-backend triton` with the tuned files beats vLLM's default and by
how much. The run is stored (GET /devices/{device}/comparisons, the report).

The Triton kernel timed, and whose trials' files are read, is the installed
vLLM's where vLLM is importable with the real Triton, else the builtin (as
`tuner verify` and `tuner sweep --kernel auto` resolve it).

--device interpreter times on the CPU: Triton's interpreter against torch
on the CPU; CPU timings, useful to try the command, not to decide.
"""

from __future__ import annotations

from dataclasses import astuple, dataclass
from typing import Annotated, Any

import typer

from db import repo
from tuner.cli.arguments import parse_m_values
from tuner.cli.devices import measuring_device, resolve_kernel_choice
from tuner.cli.errors import fail
from tuner.cli.options import (
    DbOpt,
    DeviceOpt,
    InterpreterRepsOpt,
    ModelOpt,
    OutDtypeOpt,
    TpOpt,
)
from tuner.cli.output import console, plain
from tuner.cli.store import open_db, store_files
from tuner.cli.tables import Column, print_table
from tuner.cli.verify import RoundsOpt
from tuner.compare import versus
from tuner.compare.backends import CandidateRunner, library_kernels
from tuner.compare.versus import TRITON_DEFAULT, TRITON_TUNED, Candidate, ComparePoint
from tuner.core import REQUIRED_M, ComparisonStatus, OutDtype
from tuner.files.format import vllm_pick_key
from tuner.files.merge import dense_key
from tuner.inputs.shapes import ModelShapes, UnknownModelError, load_shapes
from tuner.kernels.config import KernelConfig
from tuner.kernels.registry import DEFAULT_FAMILY, get_family
from tuner.kernels.serving import TABLE
from tuner.kernels.shape import Shape, as_block_shape
from tuner.measure.noise import RETIME_ROUNDS
from tuner.measure.runner import Problem

DEFAULT_M = ",".join(map(str, REQUIRED_M))
MOpt = Annotated[str, typer.Option("--m", help="M values to time, comma-separated.")]


def compare(
    device: DeviceOpt,
    model: ModelOpt,
    tp: TpOpt = None,
    m: MOpt = DEFAULT_M,
    rounds: RoundsOpt = RETIME_ROUNDS,
    out_dtype: OutDtypeOpt = OutDtype.bfloat16,
    interpreter_reps: InterpreterRepsOpt = 3,
    db: DbOpt = None,
) -> None:
    """`tuner compare`: its help is this module's docstring (`app.command(help=...)`)."""
    try:
        model_shapes, m_values = load_shapes(model, tp), parse_m_values(m)
    except (UnknownModelError, ValueError) as exc:
        raise fail(str(exc).strip("'\"")) from None
    timed, _ = resolve_kernel_choice("auto")
    _, store = open_db(db, must_exist=True)
    device_name, runner, _ = measuring_device(store, device, interpreter_reps)
    run = _Compare(model_shapes, runner, timed, out_dtype.value, rounds, interpreter_reps)
    read = store_files(
        store, device_name, out_dtype=run.out_dtype, allow_stale=False, allow_partial=True
    )
    tuned = {
        (f.N, f.K): f.merged.configs
        for f in read.explained().files
        if f.key == dense_key(f.N, f.K, run.block_shape)
    }
    env = runner.environment(timed, DEFAULT_FAMILY)
    defaults = versus.default_kernels(
        model_shapes.pairs(), env["compute_capability"], out_dtype.value, model_shapes.model_type
    )
    points = run.all(m_values, tuned, defaults)
    lines = versus.flag_lines(points, defaults)
    for line in lines:
        plain(line)
    with repo.session_scope(store) as session:
        comparison_id = repo.record_comparison(
            session,
            device_name=device_name,
            environment_id=repo.get_or_create_environment(session, **env),
            model=model_shapes.model,
            tp=model_shapes.tp,
            out_dtype=out_dtype.value,
            verdicts=lines,
            points=[repo.PointRow(p.N, p.K, p.M, *astuple(t)) for p in points for t in p.times],
        )
    plain(f"stored as comparison {comparison_id} of {device_name}")


@dataclass
class _Compare:
    """What every (N, K, M) of one `tuner compare` is timed with; `kernel`: whose Triton kernel
    ("builtin" or "vllm") the tuned and default columns time."""

    model_shapes: ModelShapes
    runner: Any
    kernel: str
    out_dtype: str
    rounds: int
    interpreter_reps: int

    def __post_init__(self) -> None:
        self.block_shape = as_block_shape(self.model_shapes.block_shape)
        self.library, self.unavailable = library_kernels(
            "cuda" if self.runner.on_gpu else "cpu", self.block_shape or (128, 128)
        )

    def point(self, N: int, K: int, M: int, configs) -> ComparePoint:
        """One (N, K, M) timed: the config vLLM picks from `configs` (the shape's file; None:
        none), vLLM's default config and the library kernels."""
        default = get_family(DEFAULT_FAMILY).default_config(Shape(N, K, self.block_shape), M)
        candidates = [Candidate(TRITON_DEFAULT, default)]
        missing = dict(self.unavailable)
        if configs:
            picked = KernelConfig.from_dict(configs[vllm_pick_key(configs, M)])
            candidates.insert(0, Candidate(TRITON_TUNED, picked))
        else:
            missing[TRITON_TUNED] = "no file for this shape in the store"
        candidates += [Candidate(name) for name in self.library]
        runner = CandidateRunner(
            Problem(M, N, K, self.block_shape, self.out_dtype, kernel=self.kernel),
            device="cuda" if self.runner.on_gpu else "cpu",
            library=self.library,
            seed=0,
            interpreter_reps=self.interpreter_reps,
        )
        return versus.compare_point((N, K, M), runner, candidates, missing, rounds=self.rounds)

    def all(self, m_values, tuned: dict, defaults: dict) -> list[ComparePoint]:
        """Every (shape, M); each shape's table as it ends."""
        unit = "GPU timings" if self.runner.on_gpu else f"CPU timings ({self.runner.name})"
        points = []
        for N, K in self.model_shapes.pairs():
            shape_points = [self.point(N, K, M, tuned.get((N, K))) for M in m_values]
            _print_shape(N, K, shape_points, unit, defaults[(N, K)])
            points += shape_points
        for name, reason in sorted(self.unavailable.items()):
            plain(f"not timed: {name}: {reason}")
        return points


def _print_shape(
    N: int, K: int, points: list[ComparePoint], unit: str, default: str | None
) -> None:
    """One shape's table, each column headed by its kernel's one name; vLLM's default kernel's
    (`default`, its class name) gets a *."""
    shown = [
        t.backend
        for t in points[0].times
        if t.status is not ComparisonStatus.UNAVAILABLE
        or any(p.latency(t.backend) is not None for p in points)
    ]
    marked = versus.KERNEL_BACKENDS.get(default or "")
    cells = {
        (p.M, t.backend): f"{t.latency_us:.1f}" if t.latency_us is not None else t.status
        for p in points
        for t in p.times
    }
    rows = [[str(p.M), *(cells[p.M, n] for n in shown), p.fastest or "-"] for p in points]
    headers = [name + ("*" if name == marked else "") for name in shown]
    columns = [Column("M"), *(Column(h) for h in headers), Column("fastest", optional=True)]
    print_table(console, columns, rows, title=f"N={N},K={K}, latency_us, {unit}")
    if marked in shown:
        plain(f"* vLLM's default kernel here: {default} (from {TABLE})")
    notes = {p.M: t.note for p in points for t in p.times if t.backend == TRITON_TUNED}
    plain(f"{TRITON_TUNED}: " + "; ".join(f"M={M} {note}" for M, note in notes.items()))
    for point in points:
        for time in point.times:
            if time.status is ComparisonStatus.FAILED:
                plain(f"failed: {time.backend} at M={point.M}: {time.note}")
