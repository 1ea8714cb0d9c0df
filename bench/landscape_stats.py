"""What a landscape's problems offer a search: per (N, K, M), the optimum, how much faster it is
than vLLM's default config, and how many configs come near it.

    python bench/landscape_stats.py bench/landscapes/kt_gemm_min.json [--ratios 0.98,0.97,0.95]

A problem with one or two configs near its optimum is a needle: a search of a few dozen trials
finds it by luck, whatever the strategy, so read search results on it with that in mind.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from statistics import geometric_mean, median_high

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.landscape_file import optimum  # noqa: E402
from tuner.kernels.registry import DEFAULT_FAMILY, get_family  # noqa: E402
from tuner.kernels.shape import Shape  # noqa: E402
from tuner.measure.landscape import Landscape, RecordedTimings, load_landscape  # noqa: E402


def landscape_stats(landscape: Landscape, fractions: list[float]) -> tuple[list[list], str]:
    """The table's rows (N, K, M, ok/all, optimum, optimum_us, vs default, then the configs at
    each of `fractions` of the optimum's speed, largest fraction first) over the problems with
    an ok config, and the summary line."""
    default_config = get_family(DEFAULT_FAMILY).default_config
    rows, speedups, nearest = [], [], []
    for (n, k, m), trials in sorted(landscape.problems.items()):
        best = optimum(RecordedTimings(trials))
        if best is None:
            continue
        optimum_us = best[1].ok_latency_us
        speeds = [optimum_us / result.ok_latency_us for result in trials.values() if result.ok]
        default = trials.get(default_config(Shape(n, k, landscape.block_shape), m))
        speedup = default.ok_latency_us / optimum_us if default and default.ok else None
        speedups += [] if speedup is None else [speedup]
        near = [sum(speed >= fraction for speed in speeds) for fraction in fractions]
        nearest.append((near[-1], n, k, m))
        vs_default = "cannot run" if speedup is None else f"{speedup:.2f}x"
        rows.append(
            [n, k, m, f"{len(speeds)}/{len(trials)}", best[0].short(), f"{optimum_us:.2f}"]
            + [vs_default, *near]
        )
    if not rows:
        return rows, "no (N, K, M) has an ok config"
    gain = (
        f"the optimum is {geometric_mean(speedups):.2f}x vLLM's default (geomean of the "
        f"{len(speedups)} where it runs)"
        if speedups
        else "vLLM's default runs on none of them"
    )
    fewest = min(nearest)
    return rows, (
        f"{len(rows)} (N, K, M): {gain}; configs at >= {fractions[-1]:g} of the optimum: "
        f"median {median_high(near for near, *_ in nearest)}, fewest {fewest[0]} "
        f"({','.join(map(str, fewest[1:]))})"
    )


def main(argv: list[str] | None = None) -> int:
    """Print a landscape file's table and summary; exit 2 on a bad file or --ratios."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", type=Path, help="landscape file (JSON)")
    parser.add_argument("--ratios", default="0.98,0.97,0.95", help="fractions in (0, 1]")
    args = parser.parse_args(argv)
    try:
        fractions = sorted({float(text) for text in args.ratios.split(",")}, reverse=True)
        if not all(0 < r <= 1 for r in fractions):
            raise ValueError(f"--ratios {args.ratios!r}: give fractions in (0, 1]")
        landscape = load_landscape(args.file)
    except ValueError as exc:
        parser.error(str(exc))
    rows, summary = landscape_stats(landscape, fractions)
    head = ["N", "K", "M", "ok", "optimum", "optimum_us", "vs default"]
    table = [head + [f">= {r:g}" for r in fractions], *rows]
    widths = [max(len(str(row[i])) for row in table) for i in range(len(head) + len(fractions))]
    print(f"{landscape.device_name} ({args.file.name})")
    for row in table:
        print("  ".join(str(cell).rjust(width) for cell, width in zip(row, widths, strict=True)))
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
