"""How far apart CPU timings of one config fall on Triton's interpreter: the noise `tuner verify
--device interpreter` must see exceeded before it calls a pick slower.

    python bench/interpreter_noise.py                 # tiny's two shapes, M 1, 16, 24; 12 rounds

An A/A test: per (N, K, M) and config, `ROUNDS` samples of the same config are taken into two
interleaved sets (A B A B ...), as `tuner verify` interleaves the pick and the default; the
difference of the two medians, relative to their mean, is noise by construction. Reported per
point and as the largest over all points. Writes bench/results/interpreter_noise_<date>.json.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
from datetime import UTC, datetime
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"  # before the kernel is imported
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tuner.kernels.config import KernelConfig  # noqa: E402
from tuner.kernels.dense.space import default_config  # noqa: E402
from tuner.measure.runner import KernelRunner, Problem  # noqa: E402

SHAPES = ((256, 384), (576, 256))  # the `tiny` model of the README's quick start
M_VALUES = (1, 16, 24)
ROUNDS = 12  # samples per set, as verify's RETIME_ROUNDS
# vLLM's default and a small tile (many programs: the interpreter's slow case).
CONFIGS = (default_config(), KernelConfig(16, 64, 128, 1, 4, 2))
OUT_DIR = ROOT / "bench" / "results"


def aa_gap(runner: KernelRunner, config: KernelConfig, rounds: int) -> dict:
    """Medians of two interleaved sets of samples of one config and their relative gap."""
    first, second = [], []
    for _ in range(rounds):
        first.append(runner.sample_us(config))
        second.append(runner.sample_us(config))
    a, b = statistics.median(first), statistics.median(second)
    return {
        "config": config.short(),
        "median_a_us": round(a, 1),
        "median_b_us": round(b, 1),
        "gap_ratio": round(abs(a - b) / ((a + b) / 2), 4),
    }


def main() -> None:
    rows = []
    for N, K in SHAPES:
        for M in M_VALUES:
            runner = KernelRunner(
                Problem(M=M, N=N, K=K, block_shape=(128, 128), out_dtype="bfloat16"),
                device="cpu",
            )
            for config in CONFIGS:
                runner.check(config)  # compiles nothing, but warms the path as verify does
                row = {"N": N, "K": K, "M": M, **aa_gap(runner, config, ROUNDS)}
                rows.append(row)
                print(
                    f"N={N} K={K} M={M} {row['config']}: medians {row['median_a_us']:.0f} / "
                    f"{row['median_b_us']:.0f} us, gap {row['gap_ratio']:.1%}",
                    flush=True,
                )
    worst = max(row["gap_ratio"] for row in rows)
    print(f"largest A/A gap: {worst:.1%} over {len(rows)} points")
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    result = {
        "bench": "interpreter_noise",
        "date": stamp,
        "rounds": ROUNDS,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_1min": os.getloadavg()[0],
        "largest_gap_ratio": worst,
        "rows": rows,
    }
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    path = OUT_DIR / f"interpreter_noise_{stamp}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
