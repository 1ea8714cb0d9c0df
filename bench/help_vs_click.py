"""`tuner --help` against a bare `python -c "import click"`, run alternately (one of each per
pair) so that both see the same machine load (the targets: at most 0.4 s median on an idle
machine, and at most 5 times the bare import's median).

    python bench/help_vs_click.py                 # 15 pairs, `tuner --help`
    python bench/help_vs_click.py --runs 30 --command "sweep --help"

Each run is a fresh process (`python -m tuner.cli ...`, as a user's shell starts it); the
figures are wall-time medians, with min and max. Writes bench/results/help_vs_click_<date>.json.
Not a test: timings depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT_DIR = ROOT / "bench" / "results"
RUNS = 15  # pairs
TARGET_S = 0.4  # median of `tuner --help` on an idle machine
TARGET_RATIO = 5.0  # over a bare `import click`, timed alternately with it


def wall(argv: list[str]) -> float:
    """Wall seconds of one fresh run of `argv` from the repository root; exit 1 on failure."""
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr[-300:]!r}")
    return seconds


def summary(values: list[float]) -> dict[str, float]:
    """Median, min and max in seconds, to the millisecond."""
    return {
        "median_s": round(statistics.median(values), 3),
        "min_s": round(min(values), 3),
        "max_s": round(max(values), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=RUNS, help="Pairs of runs.")
    parser.add_argument(
        "--command",
        default="--help",
        help="tuner's arguments, e.g. 'sweep --help' (default: --help).",
    )
    args = parser.parse_args()
    tuner_argv = [sys.executable, "-m", "tuner.cli", *args.command.split()]
    click_argv = [sys.executable, "-c", "import click"]
    wall(tuner_argv)  # one warm-up each: the first run pays for a cold page cache
    wall(click_argv)
    tuner_s, click_s = [], []
    for _ in range(args.runs):  # alternate, so a change of load hits both alike
        tuner_s.append(wall(tuner_argv))
        click_s.append(wall(click_argv))
    ratio = statistics.median(tuner_s) / statistics.median(click_s)
    result = {
        "bench": "help_vs_click",
        "command": f"tuner {args.command}",
        "runs": args.runs,
        "tuner": summary(tuner_s),
        "import_click": summary(click_s),
        "ratio_of_medians": round(ratio, 2),
        "target_s": TARGET_S,
        "target_ratio": TARGET_RATIO,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_1min": os.getloadavg()[0],
        "date": datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ"),
    }
    print(
        f"tuner {args.command}: median {result['tuner']['median_s']:.3f} s "
        f"(min {result['tuner']['min_s']:.3f}); import click: median "
        f"{result['import_click']['median_s']:.3f} s; ratio {ratio:.2f} "
        f"(targets: <= {TARGET_S} s idle, <= {TARGET_RATIO:g}x); load {result['load_1min']:.2f}"
    )
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    path = OUT_DIR / f"help_vs_click_{result['date']}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
