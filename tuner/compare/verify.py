"""`tuner verify`'s core: the M values to check, and vLLM's pick timed against the default (pure).

vLLM runs, for any M, the config of the file key nearest to M (vLLM 0.33.0's
`min(configs, key=lambda x: abs(x - M))`: a tie goes to the key first in the file), so a file
is only as good as its configs away from the keys. Nothing here reads the store or touches a
device: the caller passes the file's configs and a factory of runners.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from tuner.core import VLLM_M_GRID, TrialStatus
from tuner.files.format import vllm_pick_key
from tuner.kernels.config import KernelConfig
from tuner.kernels.registry import DEFAULT_FAMILY, get_family
from tuner.kernels.shape import Shape, as_block_shape
from tuner.measure.trial import TrialResult


def m_limit(keys: Iterable[int]) -> int:
    """The largest M worth checking for a file: vLLM's largest batch size (4096), or the file's
    largest key when that is larger. key + 1 of the largest key is left out above it.

    Raises:
        ValueError: no keys.
    """
    keys = list(keys)
    if not keys:
        raise ValueError("no keys to check")
    return max(VLLM_M_GRID[-1], *keys)


def check_points(keys: Iterable[int], grid: Iterable[int]) -> list[int]:
    """The M values at which `tuner verify` times vLLM's pick against the default config.

    The union of:
    - every key of the file;
    - every grid M (the caller's choice: by default the M grid of the sweeps that made the
      file; with `--m all` also vLLM's 18 batch sizes; or the `--m` list);
    - the midpoint `(a + b) // 2` of each pair of consecutive keys a < b: the largest M that
      still runs key a's config, the next one runs b's (when a + b is even it is the tie,
      which vLLM gives to a);
    - key - 1 and key + 1 of every key, the M values next to it; 0 is left out, and so is
      anything above `m_limit(keys)` (the keys and grid M are always kept).

    Args:
        keys: the file's M keys (at least one).
        grid: grid M values, each >= 1.

    Returns:
        The M values, ascending, without duplicates; e.g. keys (1, 16), grid (1, 16, 32) ->
        [1, 2, 8, 15, 16, 17, 32]; keys (16, 4096), grid () -> [15, 16, 17, 2056, 4095, 4096].

    Raises:
        ValueError: no keys, or a key or grid M below 1.
    """
    ordered = sorted(set(keys))
    grid = set(grid)
    if not ordered:
        raise ValueError("no keys to check")
    if ordered[0] < 1 or (grid and min(grid) < 1):
        raise ValueError("M values must be >= 1")
    derived = {(a + b) // 2 for a, b in zip(ordered, ordered[1:], strict=False)}
    derived.update(key + 1 for key in ordered)
    derived.update(key - 1 for key in ordered if key > 1)
    limit = m_limit(ordered)
    return sorted(set(ordered) | grid | {M for M in derived if M <= limit})


def timed_points(
    configs: Mapping[int, Mapping[str, int]],
    m_points: Iterable[int],
    block_shape: tuple[int, int] | None,
    *,
    family: str = DEFAULT_FAMILY,
    shape: Shape | None = None,
) -> list[int]:
    """The M of `m_points` where `verify_shape` runs a kernel: vLLM's pick there is not the
    default config at that M (where it is, nothing runs). Progress counts these.

    Args:
        configs: the file: M key -> config with vLLM's six keys.
        m_points: M values, each >= 1.
        block_shape: [group_n, group_k] of the weight scales.
        family: the kernel family of the file (`tuner.kernels.registry`), whose
            `default_config` vLLM runs without a file.
        shape: the family's shape of the file; None: one of `block_shape` (the family's
            defaults and checks read no more of it than block_shape and its params).

    Returns:
        Those M, in the order of `m_points`.

    Raises:
        ValueError: no configs, or an entry without vLLM's six keys.
    """
    if not configs:
        raise ValueError("the file has no keys")
    parsed = {M: KernelConfig.from_dict(entry) for M, entry in configs.items()}
    kernel_family = get_family(family)
    shape = shape if shape is not None else Shape(0, 0, as_block_shape(block_shape))
    return [
        M
        for M in m_points
        if parsed[vllm_pick_key(parsed, M)] != kernel_family.default_config(shape, M)
    ]


# The least noise a loss must exceed on the interpreter, as a fraction of the default's median:
# CPU timings swing between rounds more than a few samples' spread shows (75-500 ms seen).
# From bench/interpreter_noise.py (A/A gap of one config's medians): the largest gap, 14.4% on
# 2 busy cores (results/interpreter_noise_20261201T223042Z.json), doubled and rounded.
INTERPRETER_NOISE_FLOOR = 0.3


class Verdict(StrEnum):
    """How vLLM's pick fared at one M."""

    OK = "ok"  # not slower than the default by more than the noise, or the default itself
    SLOWER = "slower"  # slower than the default by more than the noise
    FAILED = "failed"  # the chosen config cannot run here or gave a wrong result


class RetimeLike(Protocol):
    """One config re-timed interleaved with others (tuner.measure.noise.Retime, a frozen
    dataclass: its fields are read-only here)."""

    @property
    def config(self) -> KernelConfig:
        """The re-timed config."""
        ...

    @property
    def latency_us(self) -> float:
        """Median of its samples, microseconds per launch."""
        ...

    @property
    def p20_us(self) -> float:
        """20th percentile of its samples, microseconds."""
        ...

    @property
    def p80_us(self) -> float:
        """80th percentile of its samples, microseconds."""
        ...


class SamplingRunner(Protocol):
    """Runs one (N, K, M) problem (tuner.measure.runner.KernelRunner on a device or the
    interpreter)."""

    def check(self, config: KernelConfig) -> TrialResult:
        """Run once and compare with the float64 reference."""
        ...

    def sample_us(self, config: KernelConfig) -> float:
        """One timing sample of a config, microseconds per launch."""
        ...


RunnerFactory = Callable[[int, int, int], SamplingRunner]  # (N, K, M) -> runner


class RetimeFn(Protocol):
    """Re-times configs interleaved (tuner.measure.noise.retime_interleaved's signature)."""

    def __call__(
        self,
        sample_us: Callable[[KernelConfig], float],
        configs: Sequence[KernelConfig],
        *,
        rounds: int = ...,
    ) -> Sequence[RetimeLike]:
        """One re-timing per config of `configs`, `rounds` samples of each."""
        ...


@dataclass(frozen=True)
class PointResult:
    """vLLM's pick at one M and how it compared with the default config.

    Attributes:
        M: rows of A [M, K].
        key: the file key vLLM picks for M.
        config: that key's config.
        verdict: ok, slower or failed.
        timed: False when the pick is the default config itself (nothing to compare) or failed
            before timing.
        chosen_us: median of the pick's interleaved samples, microseconds; None if not timed.
        default_us: median of the default config's samples, microseconds; None if not timed.
        noise_us: the larger p80 - p20 spread of the two, microseconds; None if not timed.
        error: why the pick failed; None otherwise.
    """

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
        if not self.timed:
            return 1.0
        assert self.default_us is not None and self.chosen_us is not None, "timed: both times"
        return self.default_us / self.chosen_us


@dataclass(frozen=True)
class ShapeVerification:
    """Every checked M of one (N, K, block_shape) file."""

    N: int
    K: int
    block_shape: tuple[int, int] | None
    keys: tuple[int, ...]
    points: tuple[PointResult, ...]

    @property
    def slower(self) -> list[int]:
        """The M where the pick is slower than the default by more than the noise."""
        return [point.M for point in self.points if point.verdict is Verdict.SLOWER]

    @property
    def failed(self) -> list[int]:
        """The M where the pick failed its check or could not run."""
        return [point.M for point in self.points if point.verdict is Verdict.FAILED]

    @property
    def offending(self) -> list[int]:
        """The M that `--fix` adds keys for: slower or failed, ascending."""
        return sorted(self.slower + self.failed)


def judge(
    chosen: RetimeLike, default: RetimeLike, noise_floor: float = 0.0
) -> tuple[Verdict, float]:
    """Slower or ok, from the interleaved re-timings of the pick and the default config.

    The noise is the larger p80 - p20 spread of the two, and at least `noise_floor` times the
    default's median; the pick is slower when its median exceeds the default's by more than
    that.

    Args:
        chosen: the pick's re-timing.
        default: the default config's re-timing.
        noise_floor: the backend's measured noise as a fraction of a median (0 on a GPU,
            whose spread is measured per point; CPU timings of the interpreter swing more
            between rounds than a few samples' spread shows).

    Returns:
        (verdict, noise_us).
    """
    noise_us = max(
        chosen.p80_us - chosen.p20_us,
        default.p80_us - default.p20_us,
        noise_floor * default.latency_us,
    )
    slower = chosen.latency_us - default.latency_us > noise_us
    return (Verdict.SLOWER if slower else Verdict.OK), noise_us


def _one_line(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:300]


def verify_point(
    M: int,
    *,
    N: int,
    K: int,
    configs: Mapping[int, KernelConfig],
    default: KernelConfig,
    block_shape: tuple[int, int] | None,
    make_runner: RunnerFactory,
    rounds: int,
    retime: RetimeFn,
    noise_floor: float = 0.0,
    family: str = DEFAULT_FAMILY,
    shape: Shape | None = None,
) -> PointResult:
    """Time vLLM's pick for one M against the default config (see `verify_shape`); `family`
    checks the pick (`KernelFamily.why_invalid` for `shape`, by default N, K and
    `block_shape`)."""
    key = vllm_pick_key(configs, M)
    config = configs[key]
    if config == default:
        return PointResult(M=M, key=key, config=config, verdict=Verdict.OK, timed=False)
    shape = shape if shape is not None else Shape(N, K, as_block_shape(block_shape))
    reason = get_family(family).why_invalid(config, shape)
    if reason is not None:
        return PointResult(
            M=M,
            key=key,
            config=config,
            verdict=Verdict.FAILED,
            timed=False,
            error=f"invalid config: {reason}",
        )
    runner = make_runner(N, K, M)
    for checked_config, label in ((config, ""), (default, "default config ")):
        try:
            checked = runner.check(checked_config)
        except Exception as exc:  # noqa: BLE001 - a config that cannot run fails, not crashes
            checked = TrialResult(TrialStatus.CRASHED, error=_one_line(exc))
        if checked.status is not TrialStatus.OK:
            return PointResult(
                M=M,
                key=key,
                config=config,
                verdict=Verdict.FAILED,
                timed=False,
                error=f"{label}{checked.status.value}: {checked.error}",
            )
    try:
        timings = {
            result.config: result
            for result in retime(runner.sample_us, [config, default], rounds=rounds)
        }
    except Exception as exc:  # noqa: BLE001
        return PointResult(
            M=M,
            key=key,
            config=config,
            verdict=Verdict.FAILED,
            timed=False,
            error=f"timing failed: {_one_line(exc)}",
        )
    verdict, noise_us = judge(timings[config], timings[default], noise_floor)
    return PointResult(
        M=M,
        key=key,
        config=config,
        verdict=verdict,
        timed=True,
        chosen_us=timings[config].latency_us,
        default_us=timings[default].latency_us,
        noise_us=noise_us,
    )


def verify_shape(
    *,
    N: int,
    K: int,
    block_shape: tuple[int, int] | None,
    configs: Mapping[int, Mapping[str, int]],
    m_points: Sequence[int],
    make_runner: RunnerFactory,
    rounds: int | None = None,
    retime: RetimeFn | None = None,
    on_point: Callable[[PointResult], None] | None = None,
    noise_floor: float = 0.0,
    family: str = DEFAULT_FAMILY,
    params: tuple[tuple[str, int], ...] = (),
) -> ShapeVerification:
    """Time, at each M, the config vLLM would run from this file against vLLM's default config
    at that M (`KernelFamily.default_config` of the file's family).

    For each M: the key vLLM picks (`tuner.files.format.vllm_pick_key`) and its config. If that
    is the default config, the speedup is 1 and nothing runs. Otherwise a runner for (N, K, M)
    checks the config, then the default, against the float64 reference (a wrong result or a
    launch failure of either is verdict FAILED), then `retime` samples the two interleaved
    (A B B A A B ...) and `judge` decides between SLOWER and OK.

    Args:
        N: rows of the weight B [N, K].
        K: reduction dimension.
        block_shape: [group_n, group_k] of the weight scales.
        configs: the file: M key -> config with vLLM's six keys (extra keys are ignored).
        m_points: the M values to check (`check_points`), each >= 1.
        make_runner: (N, K, M) -> a runner with `check` and `sample_us`; called once per M
            that is timed.
        rounds: interleaved rounds per M; None for tuner.measure.noise.RETIME_ROUNDS.
        retime: `retime(sample_us, configs, rounds=...)` returning one re-timing per config;
            None for tuner.measure.noise.retime_interleaved.
        on_point: called with each result as soon as it is known (progress output).
        noise_floor: the least noise `judge` assumes, as a fraction of the default's median.
        family: the file's kernel family (`tuner.kernels.registry`): its default config, its
            checks of a config.
        params: the family's dimensions beyond N and K, as `Shape.params`.

    Returns:
        The results in the order of `m_points`.

    Raises:
        ValueError: no configs, an entry without vLLM's six keys, or an unknown family.
    """
    kernel_family = get_family(family)
    pair = as_block_shape(block_shape)
    shape = Shape(N, K, pair, tuple(params))
    retime, rounds = _retiming(retime, rounds)
    if not configs:
        raise ValueError(f"N={N},K={K}: the file has no keys")
    parsed = {M: KernelConfig.from_dict(entry) for M, entry in configs.items()}
    results = []
    for M in m_points:
        result = verify_point(
            M,
            N=N,
            K=K,
            configs=parsed,
            default=kernel_family.default_config(shape, M),
            block_shape=block_shape,
            make_runner=make_runner,
            rounds=rounds,
            retime=retime,
            noise_floor=noise_floor,
            family=family,
            shape=shape,
        )
        if on_point is not None:
            on_point(result)
        results.append(result)
    return ShapeVerification(
        N=N, K=K, block_shape=pair, keys=tuple(sorted(parsed)), points=tuple(results)
    )


def _retiming(retime: RetimeFn | None, rounds: int | None) -> tuple[RetimeFn, int]:
    """`verify_shape`'s re-timing and rounds, tuner.measure.noise's where not given."""
    if retime is not None and rounds is not None:
        return retime, rounds
    from tuner.measure.noise import RETIME_ROUNDS, retime_interleaved

    return (
        retime if retime is not None else retime_interleaved,
        rounds if rounds is not None else RETIME_ROUNDS,
    )
