"""Landscapes: recorded timings of a config space, read from their file format (bench/
landscape_file.py writes it), and the recorded timings of one problem answering as a live runner
would (`RecordedTimings`,
what the replay runner, `tuner.measure.runner (ReplayRunner)`, measures with)."""

from __future__ import annotations

import functools
import json
import random
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tuner.core import CONFIG_KEYS, TrialStatus
from tuner.kernels.config import KernelConfig
from tuner.kernels.shape import as_block_shape
from tuner.measure.trial import TrialResult

FORMAT = "blockfp8-tuner-landscape/1"
NOT_RECORDED = "not in the landscape"
Problems = Mapping[tuple[int, int, int], Mapping[KernelConfig, TrialResult]]


@dataclass(frozen=True)
class Landscape:
    """Timings of many configs for many (N, K, M) on one device, as recorded by a sweep.

    File format (JSON, `bench/landscapes/README.md`): `format` = FORMAT, `device_name`,
    `environment` (gpu_name, compute_capability, driver, cuda, torch, triton, tuner, kernel_hash),
    `recorded_at` (ISO 8601 UTC), `space`, `out_dtype`, `block_shape`, `row_fields`
    and `problems`: a list of {N, K, M, rows}, each row [BLOCK_SIZE_M, BLOCK_SIZE_N,
    BLOCK_SIZE_K, GROUP_SIZE_M, num_warps, num_stages, status, latency_us, p20_us, p80_us]
    (latencies null unless ok).

    Attributes:
        device_name: vLLM's device key the timings were taken on.
        environment: versions and kernel hash of the recording.
        recorded_at: when it was recorded.
        space: name of the config space, e.g. "vllm".
        out_dtype: output dtype of the GEMM.
        block_shape: [group_n, group_k]; None (JSON null) for per-tensor scales.
        problems: (N, K, M) -> config -> result (status and latencies only).
    """

    device_name: str
    environment: Mapping[str, str]
    recorded_at: str
    space: str
    out_dtype: str
    block_shape: tuple[int, int] | None
    problems: Problems = field(default_factory=dict)

    def runner(self, N: int, K: int, M: int) -> RecordedTimings:
        """The recorded timings of one (N, K, M), answering as a runner.

        Raises:
            KeyError: the landscape has no timings for that problem.
        """
        if (N, K, M) not in self.problems:
            raise KeyError(f"landscape of {self.device_name} has no (N, K, M) = {(N, K, M)}")
        return RecordedTimings(self.problems[(N, K, M)])


def load_landscape(path: Path | str) -> Landscape:
    """Read a landscape file, once per process while its size and modification time are
    unchanged: a replay worker answers many tasks from one file, and parsing it (38,400 rows for
    the synthetic sm90 landscape) took about half of a replayed trial's CPU.

    Raises:
        ValueError: one line naming the file and the problem (unreadable, bad JSON, wrong
            format tag, a malformed row).
    """
    try:
        stat = Path(path).resolve().stat()
    except OSError as exc:
        raise ValueError(f"{path}: {exc.strerror or exc}") from None
    return _parse(Path(path).resolve(), (stat.st_size, stat.st_mtime_ns), str(path))


@functools.lru_cache(maxsize=8)
def _parse(path: Path, stamp: tuple[int, int], shown: str) -> Landscape:
    """The landscape at `path` (`stamp` keys the cache); errors name the file as `shown`."""
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
        if body.get("format") != FORMAT:
            raise ValueError(f"format is {body.get('format')!r}, expected {FORMAT!r}")
        problems = {}
        for problem in body["problems"]:
            trials = {}
            for row in problem["rows"]:
                status, latency_us, p20_us, p80_us = row[6:]
                config = KernelConfig.from_dict(dict(zip(CONFIG_KEYS, row[:6], strict=True)))
                latencies = (latency_us, p20_us, p80_us)
                trials[config] = TrialResult(TrialStatus(status), *latencies, measure_s=0.0)
            problems[(int(problem["N"]), int(problem["K"]), int(problem["M"]))] = trials
        fields = ("device_name", "recorded_at", "space", "out_dtype")
        return Landscape(
            **{name: str(body[name]) for name in fields},
            environment=dict(body["environment"]),
            block_shape=as_block_shape(body["block_shape"]),
            problems=problems,
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        reason = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
        raise ValueError(f"{shown}: not a landscape file: {reason}") from None


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
        p20_us + u * (p80_us - p20_us), u in [0, 1) drawn by a `random.Random` seeded with the
        config and n: the same runner asked the same questions answers the same.

        Returns:
            A latency in microseconds within [p20_us, p80_us] of the recorded result.

        Raises:
            ValueError: the config is not recorded, or its recorded result is not ok.
        """
        result = self.trials.get(config)
        if result is None or not result.ok:
            why = NOT_RECORDED if result is None else f"recorded as {result.status.value}"
            raise ValueError(f"cannot sample config {config.short()}: {why}, not ok")
        u = random.Random(f"{config.short()}#{self._sampled[config]}").random()
        self._sampled[config] += 1
        p20_us = result.ok_latency_us if result.p20_us is None else result.p20_us
        p80_us = result.ok_latency_us if result.p80_us is None else result.p80_us
        return p20_us + u * (p80_us - p20_us)
