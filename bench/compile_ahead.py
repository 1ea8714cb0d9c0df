"""Compile ahead: how long measuring waits for the compiler in one task, when the compile gate
queues only the warm starts first, and when it queues everything the search will ask first
whatever the results (`Strategy.planned`: grid's whole space; guided, the default,
plans only its warm starts, as its tiles take the settings tuned so far).

    python bench/compile_ahead.py            # defaults below; writes bench/results/*.json

No GPU needed: the trials are answered by the synthetic landscape after a sleep that stands for
the GPU's measuring (MEASURE_S), and the gate compiles each config for sm90 with Triton's
compiler in a process pool, from a fresh Triton cache per run, as a worker
does on a GPU host (tuner.run.worker.CompileAhead). The wait is the compile time measuring did not
hide; the first task of a shape and M specialization pays it, later ones find the binaries.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tuner.kernels.dense.space import default_config, vllm_space  # noqa: E402
from tuner.measure.landscape import load_landscape  # noqa: E402
from tuner.measure.runner import Problem  # noqa: E402
from tuner.run.worker import CompileAhead, WorkerShared  # noqa: E402
from tuner.search.registry import get_strategy  # noqa: E402

LANDSCAPE = Path(__file__).resolve().parent / "landscapes" / "synthetic_sm90.json"
N, K, M = 5120, 3072, 256  # a Qwen3.8-27B TP2 shape (shapes/qwen3.8-27b.toml), a prefill batch
ARCH = 90  # compile for Hopper (H100, H200), the landscape's architecture
# grid: the strategy with a planned start beyond its warm starts (guided, the default, tries its
# tiles at the settings tuned so far, so it plans only the warm starts: the first row's case).
STRATEGY, BUDGET, SEED = "grid", 128, 0  # tuner sweep's default budget; the task's seed
# GPU seconds per searched trial: the search rung's ~20 samples of ~1 ms graph replays plus
# launch overhead (tuner.run.worker SEARCH_REP_S + SEARCH_WARMUP_S); an estimate, not measured.
MEASURE_S = 0.025
WORKERS = 2  # compile processes (a worker gives its pool the CPU count minus one)
OUT_DIR = Path(__file__).resolve().parent / "results"


def run_task(first_mode: str, workers: int, measure_s: float) -> dict:
    """One task through a fresh gate; `first_mode` "warm" (before) or "planned" (after)."""
    landscape = load_landscape(LANDSCAPE)
    runner = landscape.runner(N, K, M)
    space, default = vllm_space(), default_config(landscape.block_shape)
    strategy = get_strategy(STRATEGY)
    warm = [default]
    first = (
        strategy.planned(space=space, seed=SEED, warm_start=warm)[:BUDGET]
        if first_mode == "planned"
        else warm
    )
    with tempfile.TemporaryDirectory() as folder:
        os.environ["TRITON_CACHE_DIR"] = str(Path(folder) / "triton")  # inherited by the pool
        gate = CompileAhead(workers, ARCH, WorkerShared(mp.get_context("spawn")))
        gate.start(Problem(M, N, K, landscape.block_shape, landscape.out_dtype), first)
        launched = pruned = 0
        wait_s = 0.0

        def evaluate(config):
            nonlocal launched, pruned, wait_s
            asked = time.perf_counter()
            result = gate.check(config)
            wait_s += time.perf_counter() - asked
            if result is None:
                time.sleep(measure_s)
                result = runner.evaluate(config)
                launched += 1
            else:
                pruned += 1
            return result

        start = time.perf_counter()
        history = strategy.search(evaluate, space=space, budget=BUDGET, seed=SEED, warm_start=warm)
        wall_s = time.perf_counter() - start
        gate.pool.shutdown(wait=True, cancel_futures=True)
    return {
        "first": first_mode,
        "planned_configs": len(first),
        "trials": len(history),
        "launched": launched,
        "pruned": pruned,
        "compiled": len(gate.futures),
        "compile_s": round(gate.shared.compile_s.value, 2),
        "wait_s": round(wait_s, 2),
        "measure_s": round(launched * measure_s, 2),
        "wall_s": round(wall_s, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=WORKERS, help="compile processes")
    parser.add_argument(
        "--measure-s", type=float, default=MEASURE_S, help="seconds a launched trial stands for"
    )
    parser.add_argument("--out", type=Path, default=None, help="result file (default: dated)")
    args = parser.parse_args()
    rows = [run_task(mode, args.workers, args.measure_s) for mode in ("warm", "planned")]
    print(
        f"{'first':<8} {'queued':>6} {'trials':>6} {'compiled':>8} {'compile_s':>9} "
        f"{'wait_s':>7} {'measure_s':>9} {'wall_s':>7}"
    )
    for r in rows:
        print(
            f"{r['first']:<8} {r['planned_configs']:>6} {r['trials']:>6} {r['compiled']:>8} "
            f"{r['compile_s']:>9} {r['wait_s']:>7} {r['measure_s']:>9} {r['wall_s']:>7}"
        )
    stamp = datetime.now(UTC)
    out = args.out or OUT_DIR / f"compile_ahead_{stamp:%Y%m%dT%H%M%SZ}.json"
    out.write_text(
        json.dumps(
            {
                "benchmark": "compile_ahead",
                "date": stamp.isoformat(timespec="seconds"),
                "problem": {"N": N, "K": K, "M": M, "arch": ARCH},
                "strategy": STRATEGY,
                "budget": BUDGET,
                "seed": SEED,
                "workers": args.workers,
                "measure_s": args.measure_s,
                "host": platform.node(),
                "cpus": os.cpu_count(),
                "runs": rows,
            },
            indent=1,
        )
        + "\n"
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
