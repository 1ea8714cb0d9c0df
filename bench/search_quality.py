"""Search quality: the fraction of the exhaustive optimum each strategy reaches per budget.

    python bench/search_quality.py                      # defaults below
    python bench/search_quality.py --landscape FILE --strategy optuna --budget 64 --seeds 3

For every (N, K, M) of a landscape, each strategy searches vLLM's space through a replay runner
(recorded timings, no GPU); quality = optimum latency_us / best latency_us found (1.0: found the
optimum). Two warm-start modes: "default" gives a task only vLLM's default config; "sweep"
replays a sweep's order (shapes sorted, M ascending, one worker) and gives each task the
default plus the winners its strategy found for earlier tasks (`warm_start_for_task`), and
the ok trials of the nearest related ones (`tuner.search.warm_start.related`), which `guided` learns
from.
Writes bench/results/search_quality_<date>.json with device, versions, date, landscape hash.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import multiprocessing as mp
import platform
import sys
import time
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.landscape_file import optimum  # noqa: E402
from tuner.kernels.config import KernelConfig  # noqa: E402
from tuner.kernels.dense.space import default_config, vllm_space  # noqa: E402
from tuner.measure.landscape import Landscape, load_landscape  # noqa: E402
from tuner.search.base import best  # noqa: E402
from tuner.search.registry import STRATEGIES, get_strategy  # noqa: E402
from tuner.search.warm_start import related, warm_start_for_task  # noqa: E402

HERE = Path(__file__).resolve().parent
LANDSCAPE = HERE / "landscapes" / "synthetic_sm90.json"  # recorded (or SYNTHETIC) timings
STRATEGY_NAMES = [name for name in STRATEGIES if name != "grid"]  # grid is the yardstick itself
BUDGETS = (16, 32, 64, 128, 256)  # distinct configs per (N, K, M), the default config included
SEEDS = 5  # seeds 0 .. SEEDS-1 per strategy
MODES = ("default", "sweep")  # warm starts: vLLM's default only, or a replayed sweep's winners
WORKERS = None  # processes; None: the CPU count
OUT_DIR = HERE / "results"  # where the JSON result goes


def run_job(job: tuple[str, str, int, int, str]) -> dict:
    """Quality of one (strategy, mode, seed, budget) on every problem of the landscape."""
    name, mode, seed, budget, path = job
    landscape = _landscape(path)
    space = vllm_space()
    default = default_config(landscape.block_shape)
    found: list[tuple[int, int, int, KernelConfig]] = []
    timings: dict[tuple[int, int, int], list[tuple[KernelConfig, float]]] = {}
    ratios: dict[str, float] = {}
    evaluations = 0
    start = time.perf_counter()
    for n, k, m in sorted(landscape.problems):
        runner = landscape.runner(n, k, m)
        warm = [default]
        strategy = get_strategy(name)
        learns = {}
        if mode == "sweep":
            warm = warm_start_for_task(found, N=n, K=k, M=m, default=default)
            if strategy.reads_related:
                learns["related"] = related((n, k, m), timings)
        history = strategy.search(
            runner.evaluate, space=space, budget=budget, seed=seed, warm_start=warm, **learns
        )
        timings[(n, k, m)] = [(c, r.latency_us) for c, r in history if r.ok]
        evaluations += len(history)
        winner = best(history)
        fastest = optimum(runner)
        ratios[f"{n},{k},{m}"] = (
            0.0 if winner is None else (fastest[1].latency_us / winner[1].latency_us)
        )
        if winner is not None:
            found.append((n, k, m, winner[0]))
    return {
        "strategy": name,
        "mode": mode,
        "seed": seed,
        "budget": budget,
        "ratios": ratios,
        "evaluations": evaluations,
        "search_s": time.perf_counter() - start,
    }


_LOADED: dict[str, Landscape] = {}


def _landscape(path: str) -> Landscape:
    if path not in _LOADED:
        _LOADED[path] = load_landscape(path)
    return _LOADED[path]


def summarize(runs: list[dict]) -> list[dict]:
    """Per (strategy, mode, budget): geomean and min of the ratios over problems and seeds."""
    table: dict[tuple[str, str, int], list[dict]] = {}
    for run in runs:
        table.setdefault((run["strategy"], run["mode"], run["budget"]), []).append(run)
    rows = []
    for (name, mode, budget), group in sorted(table.items()):
        ratios = [r for run in group for r in run["ratios"].values()]
        geomean = math.exp(sum(math.log(max(r, 1e-9)) for r in ratios) / len(ratios))
        rows.append(
            {
                "strategy": name,
                "mode": mode,
                "budget": budget,
                "geomean": round(geomean, 4),
                "min": round(min(ratios), 4),
                "share_at_optimum": round(sum(r >= 0.9999 for r in ratios) / len(ratios), 3),
                "problems_x_seeds": len(ratios),
                "search_s_per_task": round(sum(run["search_s"] for run in group) / len(ratios), 3),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--landscape", type=Path, default=LANDSCAPE)
    parser.add_argument("--strategy", action="append", choices=list(STRATEGIES))
    parser.add_argument("--budget", type=int, action="append")
    parser.add_argument("--seeds", type=int, default=SEEDS)
    parser.add_argument("--mode", action="append", choices=MODES)
    parser.add_argument("--workers", type=int, default=WORKERS)
    parser.add_argument("--out", type=Path, default=None, help="result file (default: dated)")
    args = parser.parse_args()
    landscape = load_landscape(args.landscape)
    jobs = [
        (name, mode, seed, budget, str(args.landscape))
        for name in args.strategy or STRATEGY_NAMES
        for mode in args.mode or MODES
        for seed in range(args.seeds)
        for budget in args.budget or BUDGETS
    ]
    start = time.perf_counter()
    with mp.get_context("spawn").Pool(args.workers) as pool:
        runs = pool.map(run_job, jobs, chunksize=1)
    rows = summarize(runs)
    print(
        f"landscape {args.landscape.name}: {landscape.device_name}, "
        f"{len(landscape.problems)} problems; {args.seeds} seeds"
    )
    print(f"{'strategy':<12}{'mode':<9}{'budget':>7}{'geomean':>9}{'min':>8}{'at opt':>8}")
    for row in rows:
        print(
            f"{row['strategy']:<12}{row['mode']:<9}{row['budget']:>7}{row['geomean']:>9.4f}"
            f"{row['min']:>8.4f}{row['share_at_optimum']:>8.3f}"
        )
    report = {
        "benchmark": "search_quality",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "landscape": str(
            args.landscape.relative_to(HERE.parent)
            if args.landscape.is_relative_to(HERE.parent)
            else args.landscape
        ),
        "landscape_sha256": hashlib.sha256(args.landscape.read_bytes()).hexdigest(),
        "device_name": landscape.device_name,
        "environment": dict(landscape.environment),
        "versions": {
            "python": platform.python_version(),
            **{name: metadata.version(name) for name in ("optuna", "blockfp8-tuner")},
        },
        "host": platform.node(),
        "seeds": args.seeds,
        "wall_s": round(time.perf_counter() - start),
        "summary": rows,
        "runs": runs,
    }
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    out = args.out or OUT_DIR / f"search_quality_{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
