"""`tuner compare`'s core (pure): time the kernels of one (N, K, M) interleaved, and turn the
points of a model into verdicts for decode and prefill. The runner and the clock come from the
caller, so this runs the same with a GPU, the interpreter or fakes."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from tuner.compare.backends import Candidate
from tuner.compare.kernel_names import BACKENDS, TRITON_DEFAULT, TRITON_TUNED
from tuner.core import TrialStatus, geomean
from tuner.measure.trial import TrialResult

# The verdicts' M ranges: decode is M <= 32, prefill M >= 2048.
DECODE_MAX_M = 32
PREFILL_MIN_M = 2048

OK = "ok"
FAILED = "failed"
UNAVAILABLE = "unavailable"


@dataclass(frozen=True)
class BackendTime:
    """One kernel at one (N, K, M).

    Attributes:
        backend: one of tuner.compare.kernel_names.BACKENDS.
        status: "ok" (checked, then timed), "failed" (wrong result or did not run) or
            "unavailable" (not timed here).
        latency_us: median of its interleaved samples, microseconds; None unless ok.
        p20_us: 20th percentile, microseconds; None unless ok.
        p80_us: 80th percentile, microseconds; None unless ok.
        note: the Triton config, or why it failed or was not timed.
    """

    backend: str
    status: str
    latency_us: float | None = None
    p20_us: float | None = None
    p80_us: float | None = None
    note: str = ""


@dataclass(frozen=True)
class ComparePoint:
    """Every kernel at one (N, K, M)."""

    N: int
    K: int
    M: int
    times: tuple[BackendTime, ...]

    def latency(self, backend: str) -> float | None:
        """The backend's median in microseconds, None when it was not timed ok."""
        for time in self.times:
            if time.backend == backend and time.status == OK:
                return time.latency_us
        return None

    @property
    def fastest(self) -> str | None:
        """The backend with the lowest median here; None when none ran."""
        timed = [
            (t.latency_us, BACKENDS.index(t.backend), t.backend)
            for t in self.times
            if t.status == OK
        ]
        return min(timed)[2] if timed else None


class CandidateSampler(Protocol):
    """tuner.compare.backends.CandidateRunner, or a fake."""

    def check(self, config: Candidate) -> TrialResult: ...

    def sample_us(self, config: Candidate) -> float: ...


RetimeFn = Callable[..., Sequence]  # tuner.measure.noise.retime_interleaved


def compare_point(
    N: int,
    K: int,
    M: int,
    *,
    runner: CandidateSampler,
    candidates: Sequence[Candidate],
    unavailable: Mapping[str, str],
    rounds: int,
    retime: RetimeFn,
) -> ComparePoint:
    """Check each candidate against the float64 reference, then time those that pass
    interleaved, one sample of each per round (`retime`), as verify does.

    When the tuned config is vLLM's default config, it is timed once, as triton-default, and
    triton-tuned gets the same numbers.

    Args:
        N, K, M: the problem.
        runner: checks and samples candidates of this problem.
        candidates: at most one per backend.
        unavailable: backend -> why it is not timed here.
        rounds: interleaved rounds.
        retime: `retime(sample_us, candidates, rounds=...)` -> one result per candidate with
            latency_us, p20_us, p80_us.

    Returns:
        One BackendTime per candidate and per unavailable backend, in BACKENDS order.
    """
    times: dict[str, BackendTime] = {
        name: BackendTime(name, UNAVAILABLE, note=reason) for name, reason in unavailable.items()
    }
    configs = {c.backend: c.config for c in candidates}
    same = TRITON_TUNED in configs and configs[TRITON_TUNED] == configs.get(TRITON_DEFAULT)
    passed = []
    for candidate in candidates:
        if same and candidate.backend == TRITON_TUNED:
            continue
        note = candidate.config.short() if candidate.config is not None else ""
        try:
            checked = runner.check(candidate)
        except Exception as exc:  # noqa: BLE001 - a kernel that cannot run fails, not crashes
            checked = TrialResult(TrialStatus.CRASHED, error=f"{type(exc).__name__}: {exc}")
        if checked.status is TrialStatus.OK:
            passed.append(candidate)
            times[candidate.backend] = BackendTime(candidate.backend, OK, note=note)
        else:
            reason = " ".join(f"{checked.status.value}: {checked.error}".split())[:200]
            times[candidate.backend] = BackendTime(candidate.backend, FAILED, note=reason)
    if passed:
        for candidate, result in zip(passed, _timed(runner, passed, rounds, retime), strict=True):
            times[candidate.backend] = (
                BackendTime(candidate.backend, FAILED, note=result)
                if isinstance(result, str)
                else BackendTime(
                    candidate.backend,
                    OK,
                    result.latency_us,
                    result.p20_us,
                    result.p80_us,
                    times[candidate.backend].note,
                )
            )
    if same:
        default = times[TRITON_DEFAULT]
        times[TRITON_TUNED] = BackendTime(
            TRITON_TUNED,
            default.status,
            default.latency_us,
            default.p20_us,
            default.p80_us,
            "vLLM's default config (the file picks it here)",
        )
    ordered = tuple(times[name] for name in BACKENDS if name in times)
    return ComparePoint(N, K, M, ordered)


@dataclass(frozen=True)
class _Timed:
    latency_us: float
    p20_us: float
    p80_us: float


def _alone(runner: CandidateSampler, candidate: Candidate, rounds: int) -> _Timed:
    from tuner.measure.timing import percentiles

    return _Timed(*percentiles([runner.sample_us(candidate) for _ in range(max(rounds, 2))]))


def _timed(
    runner: CandidateSampler, passed: Sequence[Candidate], rounds: int, retime: RetimeFn
) -> list:
    """Interleaved results of the passed candidates; when timing them together raises (a
    kernel that checks but cannot be timed, e.g. not capturable), each is timed alone and one
    that still raises gets the one-line reason (a str) instead of a result."""
    if len(passed) > 1:
        try:
            return list(retime(runner.sample_us, passed, rounds=rounds))
        except Exception:  # noqa: BLE001 - find the culprit below, alone
            pass
    results: list = []
    for candidate in passed:
        try:
            results.append(_alone(runner, candidate, rounds))
        except Exception as exc:  # noqa: BLE001 - a kernel that cannot be timed fails
            results.append(" ".join(f"timing: {type(exc).__name__}: {exc}".split())[:200])
    return results


@dataclass(frozen=True)
class Verdict:
    """Which kernel wins one regime (decode or prefill) over a model's shapes.

    Attributes:
        regime: "decode (M <= 32)" or "prefill (M >= 2048)".
        points: how many (shape, M) points fall in it.
        winner: the backend with the lowest geometric-mean latency over the points where every
            compared backend ran; None when no point qualifies.
        tuned_vs: backend -> geometric mean of (its latency / triton-tuned's) over those points:
            above 1 means the tuned Triton kernel is faster.
    """

    regime: str
    points: int
    winner: str | None
    tuned_vs: dict[str, float]

    def line(self) -> str:
        """One line for the terminal and the report."""
        if self.winner is None:
            return f"{self.regime}: no point where the kernels could all be compared"
        ratios = ", ".join(f"{name} {ratio:.3g}x" for name, ratio in self.tuned_vs.items())
        return (
            f"{self.regime}: {self.winner} is fastest over {self.points} point(s); "
            f"time of each vs triton-tuned (above 1: tuned Triton faster): {ratios}"
        )


def verdict(points: Sequence[ComparePoint], regime: str, keep: Callable[[int], bool]) -> Verdict:
    """The verdict of one regime: the points whose M `keep` accepts.

    Backends compared: those timed ok at every such point, triton-tuned among them; the
    others are left out of the verdict (their rows still show).
    """
    chosen = [p for p in points if keep(p.M)]
    backends = [
        name for name in BACKENDS if chosen and all(p.latency(name) is not None for p in chosen)
    ]
    if TRITON_TUNED not in backends:
        return Verdict(regime, len(chosen), None, {})
    means = {
        name: geomean([latency for p in chosen if (latency := p.latency(name)) is not None])
        for name in backends
    }  # none is None: `backends` keeps those timed at every point
    winner = min(backends, key=lambda name: (means[name], BACKENDS.index(name)))
    tuned = means[TRITON_TUNED]
    ratios = {name: means[name] / tuned for name in backends if name != TRITON_TUNED}
    return Verdict(regime, len(chosen), winner, ratios)


def verdicts(points: Sequence[ComparePoint]) -> list[Verdict]:
    """Decode (M <= 32) and prefill (M >= 2048) verdicts."""
    return [
        verdict(points, f"decode (M <= {DECODE_MAX_M})", lambda M: M <= DECODE_MAX_M),
        verdict(points, f"prefill (M >= {PREFILL_MIN_M})", lambda M: M >= PREFILL_MIN_M),
    ]


def per_m(points: Sequence[ComparePoint], against: str) -> dict[int, float]:
    """M -> geometric mean over shapes of (`against`'s latency / triton-tuned's), over the
    shapes where both ran: above 1 means `--linear-backend triton` with the tuned files beats
    `against` at that M by that factor."""
    ratios: dict[int, list[float]] = {}
    for point in points:
        tuned, other = point.latency(TRITON_TUNED), point.latency(against)
        if tuned is not None and other is not None:
            ratios.setdefault(point.M, []).append(other / tuned)
    return {M: geomean(values) for M, values in sorted(ratios.items())}
