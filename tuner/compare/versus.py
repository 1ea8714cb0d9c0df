"""`tuner compare`'s core (pure): the one name of each kernel it times, the kernels of one
(N, K, M) checked and timed interleaved (as `tuner verify` times vLLM's pick), vLLM's default
kernel per shape, and the verdict: whether `--linear-backend triton` with the tuned files
beats vLLM's default, per M, for decode and for prefill. The runner and the clock come from
the caller, so this runs the same with a GPU, the interpreter or fakes; nothing here imports
torch, Triton or vLLM.

vLLM's default kernel per shape is the tuner's table of vLLM 0.33.0
(`tuner.kernels.vllm_table.table_dense_kernel`, checked against the wheel in tests/engines).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tuner.core import ComparisonStatus, TrialStatus, error_line, geomean, one_line
from tuner.kernels import vllm_table
from tuner.kernels.config import KernelConfig
from tuner.kernels.serving import TABLE
from tuner.measure.noise import retime_interleaved
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
# Column order of the tables.
BACKENDS = (
    TRITON_TUNED,
    TRITON_DEFAULT,
    TORCH_SCALED_MM,
    TORCH_CPU,
    VLLM_DEEPGEMM,
    VLLM_CUTLASS,
    VLLM_MARLIN,
)
# vLLM 0.33.0 class name (kernels/linear/scaled_mm/*.py) -> the kernel name that times it.
KERNEL_BACKENDS = {
    vllm_table.DEEPGEMM: VLLM_DEEPGEMM,
    vllm_table.CUTLASS: VLLM_CUTLASS,
    vllm_table.MARLIN: VLLM_MARLIN,
}
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

    @property
    def fastest(self) -> str | None:
        """The backend with the lowest median here; None when none ran."""
        timed = [
            (t.latency_us, BACKENDS.index(t.backend), t.backend)
            for t in self.times
            if t.status is ComparisonStatus.OK
        ]
        return min(timed)[2] if timed else None


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
    """Interleaved re-timings (tuner.measure.noise.Retime) of the candidates; when timing them
    together raises (a kernel that checks but cannot be timed, e.g. not capturable), each is
    timed alone, and one that still raises gets its one-line reason (a str) instead."""
    if not candidates:
        return []
    try:
        return retime_interleaved(runner.sample_us, candidates, rounds=rounds)
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
            else replace(
                old, latency_us=result.latency_us, p20_us=result.p20_us, p80_us=result.p80_us
            )
        )
    if same:
        note = "vLLM's default config (the file picks it here)"
        times[TRITON_TUNED] = replace(times[TRITON_DEFAULT], backend=TRITON_TUNED, note=note)
    return ComparePoint(*shape, tuple(times[name] for name in BACKENDS if name in times))


def default_kernels(
    shapes: Iterable[tuple[int, int]],
    compute_capability: str | None,
    out_dtype: str,
    model_type: str | None,
) -> dict[tuple[int, int], str | None]:
    """(N, K) -> vLLM's default kernel class there, by the tuner's table; None where the table
    knows none (the interpreter's compute capability among them)."""
    capability = vllm_table.capability_number(compute_capability) or 0
    return {
        (N, K): vllm_table.table_dense_kernel(capability, N, K, out_dtype, model_type)
        for N, K in shapes
    }


def beats(ratio: float, other: str) -> str:
    """Words for `ratio` = other's time / tuned Triton's (above 1: Triton faster)."""
    if ratio > 1:
        return f"Triton beats {other} by {(ratio - 1) * 100:.1f}% ({other} takes {ratio:.3g}x)"
    if ratio < 1:
        return (
            f"{other} beats Triton by {(1 / ratio - 1) * 100:.1f}% (Triton takes {1 / ratio:.3g}x)"
        )
    return f"Triton and {other} tie"


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
