"""Landscapes: recorded timings of a config space, read from and written to their file format,
and the recorded timings of one problem answering as a live runner would (`RecordedTimings`,
what the replay runner, `tuner.measure.runners (ReplayRunner)`, measures with)."""

from __future__ import annotations

import functools
import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tuner.core import CONFIG_KEYS, TrialStatus
from tuner.kernels.config import KernelConfig
from tuner.kernels.shape import as_block_shape
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


def load_landscape(path: Path | str) -> Landscape:
    """Read a landscape file.

    Raises:
        ValueError: one line naming the file and the problem (unreadable, bad JSON, wrong
            format tag, a malformed row).
    """
    try:
        body = json.loads(Path(path).read_text(encoding="utf-8"))
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
                if values not in configs:
                    configs[values] = KernelConfig.from_dict(
                        dict(zip(CONFIG_KEYS, values, strict=True))
                    )
                status, latency_us, p20_us, p80_us = row[6:]
                trials[configs[values]] = TrialResult(
                    TrialStatus(status), latency_us, p20_us, p80_us, measure_s=0.0
                )  # as a landscape keeps it
            problems[(int(problem["N"]), int(problem["K"]), int(problem["M"]))] = trials
        fields = ("device_name", "recorded_at", "space", "out_dtype")
        return Landscape(
            **{name: str(body[name]) for name in fields},
            environment=dict(body["environment"]),
            block_shape=as_block_shape(body["block_shape"]),
            problems=problems,
        )
    except OSError as exc:
        raise ValueError(f"{path}: {exc.strerror or exc}") from None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        reason = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
        raise ValueError(f"{path}: not a landscape file: {reason}") from None


@functools.lru_cache(maxsize=8)
def _read(path: str, stamp: tuple[int, int]) -> Landscape:
    return load_landscape(path)


def cached_landscape(path: Path | str) -> Landscape:
    """`load_landscape`, read once per process while the file's size and modification time are
    unchanged: a replay worker answers many tasks from one file, and parsing it (38,400 rows for
    the synthetic sm90 landscape) took about half of a replayed trial's CPU.

    Raises:
        ValueError: unreadable or malformed (one line naming the file).
    """
    try:
        stat = Path(path).resolve().stat()
    except OSError as exc:
        raise ValueError(f"{path}: {exc.strerror or exc}") from None
    return _read(str(Path(path).resolve()), (stat.st_size, stat.st_mtime_ns))


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
        ok = ((config, result) for config, result in self.trials.items() if result.ok)
        return min(ok, key=lambda item: (item[1].ok_latency_us, item[0]), default=None)


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
