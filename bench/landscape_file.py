"""Writing landscape files, which the replay runner answers from (`tuner.measure.landscape`
reads them; `Landscape`'s docstring gives the format): a landscape from (N, K, M, config,
result) tuples, its JSON text, and a problem's optimum. Bench scripts and tests write
landscapes; the tuner only reads them."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tuner.core import CONFIG_KEYS  # noqa: E402
from tuner.kernels.config import KernelConfig  # noqa: E402
from tuner.measure.landscape import FORMAT, Landscape, RecordedTimings  # noqa: E402
from tuner.measure.trial import TrialResult  # noqa: E402

# One trial per row: the six config values in vLLM key order, then these.
ROW_FIELDS = (*CONFIG_KEYS, "status", "latency_us", "p20_us", "p80_us")


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
    for n, k, m, config, r in results:
        kept = TrialResult(r.status, r.latency_us, r.p20_us, r.p80_us, measure_s=0.0)
        problems.setdefault((n, k, m), {})[config] = kept
    return Landscape(
        device_name, dict(environment), recorded_at, space, out_dtype, block_shape, problems
    )


def landscape_json(landscape: Landscape) -> str:
    """The landscape in its file format, problems sorted by (N, K, M), rows by config."""
    problems = [
        {
            "N": n,
            "K": k,
            "M": m,
            "rows": [
                [*c.as_dict().values(), r.status.value, r.latency_us, r.p20_us, r.p80_us]
                for c, r in sorted(trials.items())
            ],
        }
        for (n, k, m), trials in sorted(landscape.problems.items())
    ]
    body = {
        "format": FORMAT,
        "device_name": landscape.device_name,
        "environment": dict(landscape.environment),
        "recorded_at": landscape.recorded_at,
        "space": landscape.space,
        "out_dtype": landscape.out_dtype,
        "block_shape": None if landscape.block_shape is None else list(landscape.block_shape),
        "row_fields": list(ROW_FIELDS),
        "problems": problems,
    }
    return json.dumps(body, indent=1) + "\n"


def optimum(runner: RecordedTimings) -> tuple[KernelConfig, TrialResult] | None:
    """The fastest recorded ok config of one problem, the yardstick of search quality (None if
    none)."""
    ok = ((config, result) for config, result in runner.trials.items() if result.ok)
    return min(ok, key=lambda item: (item[1].ok_latency_us, item[0]), default=None)
