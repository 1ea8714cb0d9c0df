"""CLI start-up: wall time of `tuner --help` and of each command's `--help`, and the slowest
imports of `tuner.cli.app` (`python -X importtime`).

    python bench/cli_startup.py                  # 5 runs of each
    python bench/cli_startup.py --runs 10 --commands --help,sweep --help

Complements bench/help_vs_click.py, which holds one command's `--help` to the targets (median
at most 0.4 s on an idle machine, at most 5x a bare `import click`): this one times every
command in one pass and lists the imports to blame. Each run is a fresh process
(`python -m tuner.cli ...`), as a user's shell starts it; the figures are the median wall time
of the runs (with min and max) and the median CPU time (user + sys), which a busy machine
inflates less. Writes bench/results/cli_startup_<date>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT_DIR = ROOT / "bench" / "results"
RUNS = 5  # fresh processes per command
TOP_IMPORTS = 12  # slowest modules (cumulative) listed from -X importtime
# Every command's --help; "" is `tuner --help`.
COMMANDS = (
    "",
    "sweep",
    "worker",
    "import",
    "status",
    "mounts",
    "serve",
    "verify",
    "compare",
    "export",
    "winners",
    "publish",
    "pull",
    "landscape record",
    "shapes list",
    "shapes show",
    "shapes from-log",
    "shapes from-config",
    "db upgrade",
)


def timed_runs(argv: list[str], runs: int) -> tuple[list[float], list[float]]:
    """Wall seconds and CPU seconds (user + sys) of `runs` fresh runs of
    `python -m tuner.cli <argv>`; exit 1 on a failure. CPU seconds vary less than wall
    seconds on a busy machine."""
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "tuner.cli", *argv], cwd=ROOT, capture_output=True
        )
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        if done.returncode != 0:
            sys.exit(f"tuner {' '.join(argv)} exited {done.returncode}: {done.stderr[-300:]!r}")
    return walls, cpus


def slowest_imports(module: str, top: int) -> list[dict]:
    """The `top` modules with the largest cumulative import time under `module`."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    rows = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line[12:]:
            continue
        own, cumulative, name = (part.strip() for part in line[12:].split("|"))
        if own.isdigit():
            rows.append({"module": name, "cumulative_us": int(cumulative), "self_us": int(own)})
    return sorted(rows, key=lambda row: -row["cumulative_us"])[:top]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=RUNS)
    parser.add_argument(
        "--commands",
        default=None,
        help="Comma-separated commands (default: every one), e.g. ',sweep'.",
    )
    args = parser.parse_args()
    commands = COMMANDS if args.commands is None else tuple(args.commands.split(","))
    rows = []
    for command in commands:
        walls, cpus = timed_runs([*command.split(), "--help"], args.runs)
        rows.append(
            {
                "command": f"tuner {command} --help".replace("  ", " "),
                "median_s": round(statistics.median(walls), 3),
                "min_s": round(min(walls), 3),
                "max_s": round(max(walls), 3),
                "cpu_median_s": round(statistics.median(cpus), 3),
            }
        )
        print(
            f"{rows[-1]['command']:<36} wall median {rows[-1]['median_s']:.3f} s "
            f"(min {rows[-1]['min_s']:.3f}, max {rows[-1]['max_s']:.3f}), "
            f"CPU median {rows[-1]['cpu_median_s']:.3f} s"
        )
    imports = slowest_imports("tuner.cli.app", TOP_IMPORTS)
    for row in imports:
        print(f"  import {row['module']:<40} {row['cumulative_us'] / 1e6:.3f} s cumulative")
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    result = {
        "bench": "cli_startup",
        "date": stamp,
        "runs": args.runs,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load_1min": os.getloadavg()[0],
        "rows": rows,
        "slowest_imports": imports,
    }
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    path = OUT_DIR / f"cli_startup_{stamp}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
