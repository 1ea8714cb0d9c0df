"""The core of `tuner compare` and `tuner verify` (pure): the kernels of one (N, K, M) checked
against the float64 reference and timed interleaved (`compare_point`, the one path of both).

`tuner compare`: the one name of each kernel it times, vLLM's default kernel per shape (the
tuner's table of vLLM 0.33.0, `tuner.kernels.vllm_table.table_dense_kernel`, checked against
the wheel in tests/engines), and the verdict: whether `--linear-backend triton` with the tuned
files beats vLLM's default, per M, for decode and for prefill.

`tuner verify`: the M values each file is checked at, vLLM's pick there timed against its
default config (`verify_shape`), and `--fix`'s tune-and-check passes. vLLM runs, for any M, the
config of the file key nearest to M (vLLM 0.33.0's `min(configs, key=lambda x: abs(x - M))`: a
tie goes to the smaller key), so a file is only as good as its configs away from the keys.

The runner and the clock come from the caller, so this runs the same with a GPU, the
interpreter or fakes; nothing here reads the store, prints, or imports torch, Triton or vLLM.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from tuner.core import VLLM_M_GRID, ComparisonStatus, TrialStatus, error_line, geomean, one_line
from tuner.files.format import vllm_pick_key
from tuner.files.merge import DeviceFiles
from tuner.inputs.shapes import ModelShapes
from tuner.kernels import vllm_table
from tuner.kernels.config import KernelConfig
from tuner.kernels.registry import DEFAULT_FAMILY, get_family
from tuner.kernels.serving import TABLE
from tuner.kernels.shape import FamilyShape, Shape, as_block_shape
from tuner.measure.noise import RETIME_ROUNDS, retime_interleaved
from tuner.measure.trial import TrialResult

# The one name of each kernel, alike in the tables, summary lines, "not timed" lines, the stored
# comparison (GET /devices/{d}/comparisons) and the report.
TRITON_TUNED = "triton-tuned"  # the Triton kernel with the config vLLM picks from the files
TRITON_DEFAULT = "triton-default"  # the Triton kernel with vLLM's default config
TORCH_SCALED_MM = "torch-scaled_mm"  # torch.nn.functional.scaled_mm, block-wise scales
TORCH_CPU = "torch-dequant-cpu"  # dequantize + matmul on the CPU (the interpreter's stand-in)
VLLM_DEEPGEMM = "vllm-deepgemm"
VLLM_CUTLASS = "vllm-cutlass"
VLLM_MARLIN = "vllm-marlin"
# vLLM 0.33.0 class name (kernels/linear/scaled_mm/*.py) -> the kernel name that times it.
KERNEL_BACKENDS = {
    vllm_table.DEEPGEMM: VLLM_DEEPGEMM,
    vllm_table.CUTLASS: VLLM_CUTLASS,
    vllm_table.MARLIN: VLLM_MARLIN,
}
# Column order of the tables.
BACKENDS = (TRITON_TUNED, TRITON_DEFAULT, TORCH_SCALED_MM, TORCH_CPU, *KERNEL_BACKENDS.values())
# The verdicts' M ranges: decode is M <= 32, prefill M >= 2048.
REGIMES: tuple[tuple[str, Callable[[int], bool]], ...] = (
    ("decode (M <= 32)", lambda M: M <= 32),
    ("prefill (M >= 2048)", lambda M: M >= 2048),
)


@dataclass(frozen=True)
class Candidate:
    """One kernel to time: a Triton config, or a library kernel by name (`config` None)."""

    backend: str
    config: KernelConfig | None = None


@dataclass(frozen=True)
class BackendTime:
    """One kernel at one (N, K, M): its status, its median and percentiles in microseconds
    (None unless ok), and the Triton config or why it failed or was not timed."""

    backend: str
    status: ComparisonStatus
    latency_us: float | None = None
    p20_us: float | None = None
    p80_us: float | None = None
    note: str = ""


@dataclass(frozen=True)
class ComparePoint:
    """Every kernel at one (N, K, M), in BACKENDS order."""

    N: int
    K: int
    M: int
    times: tuple[BackendTime, ...]

    def latency(self, backend: str) -> float | None:
        """The backend's median in microseconds, None when it was not timed ok."""
        for time in self.times:
            if time.backend == backend and time.status is ComparisonStatus.OK:
                return time.latency_us
        return None


def _checked(runner: Any, candidate: Candidate) -> BackendTime:
    """A candidate checked against the float64 reference: ok (untimed yet) or failed with
    `status: error` in one line (a kernel that raises fails, it does not crash the run)."""
    try:
        checked = runner.check(candidate)
    except Exception as exc:  # noqa: BLE001 - a kernel that cannot run fails, not crashes
        checked = TrialResult(TrialStatus.CRASHED, error=error_line(exc))
    if checked.status is not TrialStatus.OK:
        note = one_line(f"{checked.status.value}: {checked.error}")
        return BackendTime(candidate.backend, ComparisonStatus.FAILED, note=note)
    note = candidate.config.short() if candidate.config is not None else ""
    return BackendTime(candidate.backend, ComparisonStatus.OK, note=note)


def _timed(runner: Any, candidates: Sequence[Any], rounds: int) -> list:
    """Interleaved (median, p20, p80) of the candidates in microseconds; when timing them
    together raises (a kernel that checks but cannot be timed, e.g. not capturable), each is
    timed alone, and one that still raises gets its one-line reason (a str) instead."""
    if not candidates:
        return []
    try:
        timed = retime_interleaved(runner.sample_us, candidates, rounds=rounds)
        return [(r.latency_us, r.p20_us, r.p80_us) for r in timed]
    except Exception as exc:  # noqa: BLE001 - find the culprit below, alone
        if len(candidates) == 1:
            return [f"timing: {error_line(exc)}"]
    return [result for c in candidates for result in _timed(runner, [c], rounds)]


def compare_point(
    shape: tuple[int, int, int],
    runner: Any,
    candidates: Sequence[Candidate],
    unavailable: Mapping[str, str],
    *,
    rounds: int,
) -> ComparePoint:
    """Check each candidate of (N, K, M) = `shape` against the float64 reference with
    `runner` (`check` and `sample_us` of a Candidate), then time those that pass interleaved,
    one sample of each per round (tuner.measure.noise.retime_interleaved); `tuner verify`
    times vLLM's pick against the default config with it too. A tuned config that is vLLM's
    default config is timed once, as triton-default, and triton-tuned gets its numbers.
    `unavailable`: kernel -> why it is not timed here."""
    times = {
        name: BackendTime(name, ComparisonStatus.UNAVAILABLE, note=reason)
        for name, reason in unavailable.items()
    }
    configs = {c.backend: c.config for c in candidates}
    same = TRITON_TUNED in configs and configs[TRITON_TUNED] == configs.get(TRITON_DEFAULT)
    timing = [c for c in candidates if not (same and c.backend == TRITON_TUNED)]
    times.update({c.backend: _checked(runner, c) for c in timing})
    passed = [c for c in timing if times[c.backend].status is ComparisonStatus.OK]
    for candidate, result in zip(passed, _timed(runner, passed, rounds), strict=True):
        old = times[candidate.backend]
        times[candidate.backend] = (
            replace(old, status=ComparisonStatus.FAILED, note=result)
            if isinstance(result, str)
            else replace(old, latency_us=result[0], p20_us=result[1], p80_us=result[2])
        )
    if same:
        note = "vLLM's default config (the file picks it here)"
        times[TRITON_TUNED] = replace(times[TRITON_DEFAULT], backend=TRITON_TUNED, note=note)
    return ComparePoint(*shape, tuple(times[name] for name in BACKENDS if name in times))


def beats(ratio: float, other: str) -> str:
    """Words for `ratio` = other's time / tuned Triton's (above 1: Triton faster)."""
    if ratio == 1:
        return f"Triton and {other} tie"
    winner, loser, times = ("Triton", other, ratio) if ratio > 1 else (other, "Triton", 1 / ratio)
    return f"{winner} beats {loser} by {(times - 1) * 100:.1f}% ({loser} takes {times:.3g}x)"


def flag_lines(
    points: Sequence[ComparePoint], defaults: Mapping[tuple[int, int], str | None]
) -> list[str]:
    """Whether `--linear-backend triton` with the tuned files beats vLLM's default kernel
    (`defaults`, per shape): per M (geometric mean over shapes of the default's time over
    tuned Triton's), then decode and prefill apart (over their points)."""
    ratios: dict[int, list[float]] = {}
    timed_as = set()
    for point in points:
        name = KERNEL_BACKENDS.get(defaults[(point.N, point.K)] or "", "")
        tuned, default_us = point.latency(TRITON_TUNED), point.latency(name)
        if tuned is not None and default_us is not None:
            ratios.setdefault(point.M, []).append(default_us / tuned)
            timed_as.add(name)
    kernels = ", ".join(sorted({kernel for kernel in defaults.values() if kernel}))
    if not ratios:
        return [f"vLLM's default kernel ({kernels or 'not known here'}) was not timed here"]
    other = " / ".join(sorted(timed_as))
    lines = [
        f"vLLM's default here: {kernels} (timed as {other}; from {TABLE}). "
        "--linear-backend triton with the tuned files vs it, per M (geometric mean over shapes):"
    ]
    lines += [f"  M={M}: {beats(geomean(v), other)}" for M, v in sorted(ratios.items())]
    for regime, keep in REGIMES:
        values = [v for M, vs in ratios.items() if keep(M) for v in vs]
        said = (
            f"{beats(geomean(values), other)} over {len(values)} point(s)"
            if values
            else f"no point where Triton and {other} both ran"
        )
        lines.append(f"--linear-backend triton, {regime}: {said}")
    return lines


# The least noise a loss must exceed on the interpreter, as a fraction of the default's median:
# CPU timings swing between rounds more than a few samples' spread shows. From
# bench/interpreter_noise.py (A/A gap of one config's medians): the largest gap, 14.4% on 2 busy
# cores (results/interpreter_noise_20261201T223042Z.json), doubled and rounded.
INTERPRETER_NOISE_FLOOR = 0.3


def shape_label(N: int, K: int) -> str:
    """`N=5120,K=3072`, as vLLM's file names write a shape."""
    return f"N={N},K={K}"


def check_points(keys: Iterable[int], grid: Iterable[int]) -> list[int]:
    """The M values at which vLLM's pick is timed against the default config: every key, every
    grid M, the midpoint `(a + b) // 2` of each pair of neighbouring keys (the largest M that
    still runs key a's config), and key - 1 and key + 1 of every key; 0 and derived values
    above vLLM's largest batch size (or the largest key, when larger) are left out.

    E.g. keys (1, 16), grid (1, 16, 32) -> [1, 2, 8, 15, 16, 17, 32].
    """
    ordered, grid = sorted(set(keys)), set(grid)
    derived = {(a + b) // 2 for a, b in zip(ordered, ordered[1:], strict=False)}
    derived |= {key + 1 for key in ordered} | {key - 1 for key in ordered if key > 1}
    limit = max(VLLM_M_GRID[-1], *ordered)
    return sorted(set(ordered) | grid | {M for M in derived if M <= limit})


class Verdict(StrEnum):
    """How vLLM's pick fared at one M."""

    OK = "ok"  # not slower than the default by more than the noise, or the default itself
    SLOWER = "slower"  # slower than the default by more than the noise
    FAILED = "failed"  # the chosen config cannot run here or gave a wrong result


@dataclass(frozen=True)
class PointResult:
    """vLLM's pick at one M: its key and config, the verdict, whether it was timed (not when
    it is the default config itself or failed first), both medians and the noise in
    microseconds (None when not timed), and why it failed."""

    M: int
    key: int
    config: KernelConfig
    verdict: Verdict
    timed: bool
    chosen_us: float | None = None
    default_us: float | None = None
    noise_us: float | None = None
    error: str | None = None

    @property
    def speedup(self) -> float | None:
        """Default time over the pick's time: 1.0 for the default itself, None when failed."""
        if self.verdict is Verdict.FAILED:
            return None
        if self.default_us is None or self.chosen_us is None:
            return 1.0
        return self.default_us / self.chosen_us


@dataclass(frozen=True)
class ShapeVerification:
    """Every checked M of one (N, K) dense file."""

    N: int
    K: int
    points: tuple[PointResult, ...]

    @property
    def offending(self) -> list[int]:
        """The M that `--fix` adds keys for: slower or failed, ascending."""
        return sorted(point.M for point in self.points if point.verdict is not Verdict.OK)


def judge(chosen: Any, default: Any, noise_floor: float = 0.0) -> tuple[Verdict, float]:
    """(verdict, noise_us) from the interleaved re-timings (tuner.measure.noise.Retime) of the
    pick and the default: the pick is slower when its median exceeds the default's by more
    than the larger p80 - p20 spread of the two, and than `noise_floor` times the default's
    median (0 on a GPU; CPU timings swing more between rounds than their spread shows)."""
    noise_us = max(
        chosen.p80_us - chosen.p20_us,
        default.p80_us - default.p20_us,
        noise_floor * default.latency_us,
    )
    slower = chosen.latency_us - default.latency_us > noise_us
    return (Verdict.SLOWER if slower else Verdict.OK), noise_us


@dataclass(frozen=True)
class PlannedShape:
    """One shape's file and the M values it is checked at."""

    shape: Shape
    configs: Mapping[int, Mapping[str, int]]
    m_points: tuple[int, ...]


def verify_shape(
    planned: PlannedShape,
    make_runner: Callable[[int, int, int], Any],
    *,
    family: str = DEFAULT_FAMILY,
    rounds: int = RETIME_ROUNDS,
    noise_floor: float = 0.0,
) -> ShapeVerification:
    """Time, at each M of the planned `m_points`, the config vLLM runs from the shape's file
    (`configs`: M key -> vLLM's six keys) against the family's default config at that M;
    `make_runner(N, K, M)`: a runner with `check` and `sample_us` of a Candidate
    (`tuner.compare.backends.CandidateRunner` on a device or the interpreter).
    Where the pick is the default nothing runs; otherwise `tuner compare`'s `compare_point`
    checks both against the float64 reference with a runner for (N, K, M) (a wrong result, a
    failed launch or timing is FAILED) and times them interleaved, and `judge` decides.

    Raises:
        ValueError: an entry without vLLM's six keys, or an unknown family.
    """
    shape, kernels = planned.shape, get_family(family)
    parsed = {M: KernelConfig.from_dict(entry) for M, entry in planned.configs.items()}

    def point(M: int) -> PointResult:
        key = vllm_pick_key(parsed, M)
        config, default = parsed[key], kernels.default_config(shape, M)
        if config == default:
            return PointResult(M, key, config, Verdict.OK, False)
        reason = kernels.why_invalid(config, shape)
        if reason:
            error = f"invalid config: {reason}"
            return PointResult(M, key, config, Verdict.FAILED, False, error=error)
        runner = make_runner(shape.N, shape.K, M)
        pair = [Candidate(TRITON_TUNED, config), Candidate(TRITON_DEFAULT, default)]
        chosen, base = compare_point((shape.N, shape.K, M), runner, pair, {}, rounds=rounds).times
        for timed, label in ((chosen, ""), (base, "default config ")):
            if timed.status is not ComparisonStatus.OK:
                error = label + timed.note
                return PointResult(M, key, config, Verdict.FAILED, False, error=error)
        verdict, noise_us = judge(chosen, base, noise_floor)
        return PointResult(
            M, key, config, verdict, True, chosen.latency_us, base.latency_us, noise_us
        )

    results = tuple(point(M) for M in planned.m_points)
    return ShapeVerification(shape.N, shape.K, results)


def plan(
    model_shapes: ModelShapes,
    files: DeviceFiles,
    grids: Mapping[FamilyShape, Sequence[int]],
    only: set[tuple[int, int]] | None = None,
) -> tuple[list[PlannedShape], list[str]]:
    """The model's dense shapes to check (those of `only` when given), in model order, each at
    the `check_points` of its keys and the M grid of the sweeps that made it (`grids`), and one
    line per shape without a file (vLLM runs its default config there).

    Raises:
        ValueError: none of the model's dense shapes has a file to check (one line).
    """
    by_key = {file.key: file for file in files.files}
    skipped = {item.key: item.reason for item in files.skipped}
    planned, reasons = [], []
    for N, K in model_shapes.shapes:
        key = FamilyShape(DEFAULT_FAMILY, Shape(N, K, as_block_shape(model_shapes.block_shape)))
        if only is not None and (N, K) not in only:
            continue
        if key not in by_key:
            reasons.append((shape_label(N, K), skipped.get(key, "no trials in the store")))
            continue
        configs = by_key[key].merged.configs
        m_points = check_points(configs, grids.get(key, ()))
        planned.append(PlannedShape(key.shape, configs, tuple(m_points)))
    if not planned and only is None:
        model = f"{model_shapes.model} TP {model_shapes.tp}"
        raise ValueError(f"no file of {model} to check ({'; '.join(map(': '.join, reasons))})")
    missing = [f"{s}: no file ({why}); vLLM runs its default config there" for s, why in reasons]
    return planned, missing


def summary_line(results: Sequence[ShapeVerification]) -> str:
    """e.g. "2 shape(s), 12 M values: 10 ok (7 run the default config), 2 slower, 0 failed"."""
    points = [point for result in results for point in result.points]
    counts = {verdict: sum(point.verdict is verdict for point in points) for verdict in Verdict}
    untimed = sum(point.verdict is Verdict.OK and not point.timed for point in points)
    return (
        f"{len(results)} shape(s), {len(points)} M values: {counts[Verdict.OK]} ok "
        f"({untimed} run the default config), {counts[Verdict.SLOWER]} slower, "
        f"{counts[Verdict.FAILED]} failed"
    )
