"""Landscapes: recorded timings of a config space, read from and written to their file format,
and the recorded timings of one problem answering as a live runner would (`RecordedTimings`,
what the replay runner, `tuner.measure.runners (ReplayRunner)`, measures with)."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tuner.core import CONFIG_KEYS, TrialStatus
from tuner.kernels.config import KernelConfig
from tuner.kernels.shape import Shape, as_block_shape
from tuner.measure.trial import TrialResult

FORMAT = "blockfp8-tuner-landscape/1"
# One trial per row: the six config values in vLLM key order, then these.
ROW_FIELDS = (*CONFIG_KEYS, "status", "latency_us", "p20_us", "p80_us")
NOT_RECORDED = "not in the landscape"


@dataclass(frozen=True)
class Landscape:
    """Timings of many configs for many (N, K, M) on one device, as recorded by a sweep.

    File format (JSON, `bench/landscapes/README.md`): `format` = FORMAT, `device_name`,
    `environment` (gpu_name, compute_capability, driver, cuda, torch, triton, tuner, kernel_hash),
    `recorded_at` (ISO 8601 UTC), `space`, `out_dtype`, `block_shape`, and `problems`: a list of
    {N, K, M, rows} where each row is [BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K, GROUP_SIZE_M,
    num_warps, num_stages, status, latency_us, p20_us, p80_us] (latencies null unless ok).

    Attributes:
        device_name: vLLM's device key the timings were taken on.
        environment: versions and kernel hash of the recording.
        recorded_at: when it was recorded.
        space: name of the config space, e.g. "vllm".
        out_dtype: output dtype of the GEMM.
        block_shape: [group_n, group_k]; None (JSON null) for per-tensor scales.
        problems: (N, K, M) -> config -> result.
    """

    device_name: str
    environment: Mapping[str, str]
    recorded_at: str
    space: str
    out_dtype: str
    block_shape: tuple[int, int] | None
    problems: Mapping[tuple[int, int, int], Mapping[KernelConfig, TrialResult]] = field(
        default_factory=dict
    )

    def to_json(self) -> str:
        """The landscape in its file format, problems sorted by (N, K, M), rows by config."""

        def row(config: KernelConfig, r: TrialResult) -> list:
            return [*config.as_dict().values(), r.status.value, r.latency_us, r.p20_us, r.p80_us]

        problems = [
            {"N": n, "K": k, "M": m, "rows": [row(c, r) for c, r in sorted(trials.items())]}
            for (n, k, m), trials in sorted(self.problems.items())
        ]
        fields = ("device_name", "environment", "recorded_at", "space", "out_dtype")
        body = {"format": FORMAT, **{name: getattr(self, name) for name in fields}}
        body["environment"] = dict(self.environment)
        body["block_shape"] = None if self.block_shape is None else list(self.block_shape)
        body |= {"row_fields": list(ROW_FIELDS), "problems": problems}
        return json.dumps(body, indent=1) + "\n"

    def runner(self, N: int, K: int, M: int) -> RecordedTimings:
        """The recorded timings of one (N, K, M), answering as a runner.

        Raises:
            KeyError: the landscape has no timings for that problem.
        """
        key = (N, K, M)
        if key not in self.problems:
            raise KeyError(f"landscape of {self.device_name} has no (N, K, M) = {key}")
        return RecordedTimings(self.problems[key])


def parse_landscape(text: str, *, source: str = "<landscape>") -> Landscape:
    """Read a landscape file.

    Raises:
        ValueError: one line naming `source` and the problem (bad JSON, wrong format tag,
            a malformed row).
    """
    try:
        body = json.loads(text)
        if body.get("format") != FORMAT:
            raise ValueError(f"format is {body.get('format')!r}, expected {FORMAT!r}")
        problems: dict[tuple[int, int, int], dict[KernelConfig, TrialResult]] = {}
        configs: dict[tuple, KernelConfig] = {}  # one object per config across problems
        for problem in body["problems"]:
            trials = {}
            for row in problem["rows"]:
                if len(row) != len(ROW_FIELDS):
                    raise ValueError(f"row {row!r} has {len(row)} fields, not {len(ROW_FIELDS)}")
                values = tuple(row[:6])
                config = configs.get(values)
                if config is None:
                    config = configs[values] = KernelConfig.from_dict(
                        dict(zip(CONFIG_KEYS, values, strict=True))
                    )
                status, latency_us, p20_us, p80_us = row[6:]
                trials[config] = TrialResult(
                    TrialStatus(status), latency_us, p20_us, p80_us, measure_s=0.0
                )  # as a landscape keeps it
            problems[(int(problem["N"]), int(problem["K"]), int(problem["M"]))] = trials
        block_shape = as_block_shape(body["block_shape"])
        return Landscape(
            device_name=str(body["device_name"]),
            environment=dict(body["environment"]),
            recorded_at=str(body["recorded_at"]),
            space=str(body["space"]),
            out_dtype=str(body["out_dtype"]),
            block_shape=block_shape,
            problems=problems,
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        reason = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
        raise ValueError(f"{source}: not a landscape file: {reason}") from None


def load_landscape(path: Path | str) -> Landscape:
    """Read a landscape file from disk.

    Raises:
        ValueError: unreadable or malformed (one line naming the file).
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"{path}: {exc.strerror or exc}") from None
    return parse_landscape(text, source=str(path))


# The landscapes this process has read: resolved path -> ((size, mtime_ns), landscape).
_READ: dict[str, tuple[tuple[int, int], Landscape]] = {}


def cached_landscape(path: Path | str) -> Landscape:
    """`load_landscape`, read once per process while the file is unchanged.

    A replay worker answers many tasks from one file; parsing it (38,400 rows for the synthetic
    sm90 landscape) took about half of a replayed trial's CPU when every task re-read it. The
    file is read again when its size or modification time changed.

    Raises:
        ValueError: unreadable or malformed (one line naming the file).
    """
    resolved = Path(path).resolve()
    try:
        stat = resolved.stat()
    except OSError as exc:
        raise ValueError(f"{path}: {exc.strerror or exc}") from None
    stamp = (stat.st_size, stat.st_mtime_ns)
    known = _READ.get(str(resolved))
    if known is None or known[0] != stamp:
        known = _READ[str(resolved)] = (stamp, load_landscape(path))
    return known[1]


class RecordedTimings:
    """Answers `evaluate(config)` from recorded timings, with no GPU (one problem of a replay).

    A config the landscape did not record answers as `invalid` with the reason "not in the
    landscape", so strategies treat it as a config that cannot run.
    """

    def __init__(self, trials: Mapping[KernelConfig, TrialResult]) -> None:
        self.trials = trials
        self._sampled: Counter[KernelConfig] = Counter()

    def evaluate(self, config: KernelConfig) -> TrialResult:
        """The recorded result of a config."""
        return self.trials.get(config) or TrialResult(
            TrialStatus.INVALID, error=NOT_RECORDED, measure_s=0.0
        )

    def sample_us(self, config: KernelConfig) -> float:
        """One made-up timing sample of a recorded ok config, as `KernelRunner.sample_us` gives.

        The n-th call for a config (n counted per config from 0) answers
        p20_us + u * (p80_us - p20_us), where u in [0, 1) is read from the sha256 of the
        config's six values and n: the same runner asked the same questions answers the same.

        Returns:
            A latency in microseconds within [p20_us, p80_us] of the recorded result.

        Raises:
            ValueError: the config is not recorded, or its recorded result is not ok.
        """
        result = self.trials.get(config)
        if result is None or not result.ok:
            why = NOT_RECORDED if result is None else f"recorded as {result.status.value}"
            raise ValueError(f"cannot sample config {config.short()}: {why}, not ok")
        call = self._sampled[config]
        self._sampled[config] += 1
        values = ",".join(str(v) for v in config.as_dict().values())
        digest = hashlib.sha256(f"{values}#{call}".encode()).digest()
        u = int.from_bytes(digest[:8], "big") / 2**64
        p20_us = result.ok_latency_us if result.p20_us is None else result.p20_us
        p80_us = result.ok_latency_us if result.p80_us is None else result.p80_us
        return p20_us + u * (p80_us - p20_us)

    def optimum(self) -> tuple[KernelConfig, TrialResult] | None:
        """The fastest recorded ok config, the yardstick of search quality (None if none)."""
        ok = [(config, result) for config, result in self.trials.items() if result.ok]
        return min(ok, key=lambda item: (item[1].latency_us, item[0])) if ok else None


def landscape_from_results(
    *,
    device_name: str,
    environment: Mapping[str, str],
    recorded_at: str,
    space: str,
    out_dtype: str,
    block_shape: tuple[int, int] | None,
    results: Iterable[tuple[int, int, int, KernelConfig, TrialResult]],
) -> Landscape:
    """Build a landscape from (N, K, M, config, result) tuples, e.g. read from the store.

    Only status and latencies are kept; replaying a trial takes no time.
    """
    problems: dict[tuple[int, int, int], dict[KernelConfig, TrialResult]] = {}
    for n, k, m, config, result in results:
        latencies = (result.latency_us, result.p20_us, result.p80_us)
        kept = TrialResult(result.status, *latencies, measure_s=0.0)
        problems.setdefault((n, k, m), {})[config] = kept
    return Landscape(
        device_name, dict(environment), recorded_at, space, out_dtype, block_shape, problems
    )


@dataclass(frozen=True)
class ProblemStats:
    """How one (N, K, M) of a landscape looks to a search (`problem_stats`).

    Attributes:
        N, K, M: the problem.
        recorded: configs with a row (any status).
        ok: configs that ran.
        optimum: the fastest ok config (`RecordedTimings.optimum`).
        optimum_us: its median latency in microseconds.
        default_speedup: the default config's latency over the optimum's (how much a search
            can win over it), or None where the default did not run or has no row.
        near: for each ratio asked for, the ok configs whose speed is at least that fraction
            of the optimum's (optimum_us / latency_us >= ratio; the optimum counts): the
            configs a search must hit to reach that quality.
    """

    N: int
    K: int
    M: int
    recorded: int
    ok: int
    optimum: KernelConfig
    optimum_us: float
    default_speedup: float | None
    near: tuple[int, ...]


def problem_stats(
    landscape: Landscape,
    default: KernelConfig | Callable[[Shape, int], KernelConfig],
    ratios: Iterable[float] = (0.98, 0.97, 0.95),
) -> list[ProblemStats]:
    """Per (N, K, M) of `landscape` with an ok config, in (N, K, M) order: its optimum, what
    it gains over `default`, and how many configs come within each of `ratios` of it. Few
    configs near the optimum make a needle no search finds in a few trials: on the held-out
    `kt_conv` landscape 4 of 12 problems have one config of 878-945 within 0.97
    (bench/landscapes/README.md).

    Args:
        landscape: the recorded timings.
        default: the config to compare with, or a family's `default_config` ((shape, M) ->
            the config vLLM runs at M), called per problem with the landscape's block_shape.
        ratios: fractions of the optimum's speed, each in (0, 1].
    """
    ratios = tuple(ratios)
    found = []
    for (n, k, m), trials in sorted(landscape.problems.items()):
        best = RecordedTimings(trials).optimum()
        if best is None:
            continue
        optimum, result = best
        optimum_us = result.ok_latency_us
        speeds = [optimum_us / r.ok_latency_us for r in trials.values() if r.ok]
        fallback = trials.get(
            default(Shape(n, k, landscape.block_shape), m) if callable(default) else default
        )
        found.append(
            ProblemStats(
                n,
                k,
                m,
                len(trials),
                len(speeds),
                optimum,
                optimum_us,
                fallback.ok_latency_us / optimum_us
                if fallback is not None and fallback.ok
                else None,
                tuple(sum(speed >= ratio for speed in speeds) for ratio in ratios),
            )
        )
    return found
