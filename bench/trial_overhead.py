"""Trial overhead: the CPU a replayed trial costs besides its (zero) measuring time.

    python bench/trial_overhead.py                       # the synthetic sm90 landscape, 128 trials
    python bench/trial_overhead.py --landscape FILE --trials 64 --strategy local

On a GPU a searched trial is about 25 ms of measuring (tuner.run.worker: SEARCH_REP_S plus warm-up
and the correctness check); everything else the worker does per trial (the search's own step,
the store, bookkeeping) leaves the GPU idle. The replay runner answers trials from a recorded
landscape at no cost, so its CPU per trial is that overhead. Four figures:
- `with_store`: a worker (`tuner.run.worker.worker_main`, in this process) running every task of
  a planned sweep: claim, search, record every trial, re-time, decide, finish;
- `without_store`: the same searches, warm starts, re-timing and decisions with no store;
- `store`: the difference, and the store's transactions (commits) per trial;
- `sweep`: user + sys CPU of the whole `tuner sweep --replay` command (CLI, supervisor, worker
  process, imports), whose target is under 5 s for the synthetic landscape's 3,840.
Writes bench/results/trial_overhead_<date>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tuner.measure.landscape import load_landscape  # noqa: E402

LANDSCAPE = ROOT / "bench" / "landscapes" / "synthetic_sm90.json"
MODEL, TP = "qwen3.8-27b", 2  # the five shapes of the landscapes here
OUT_DIR = ROOT / "bench" / "results"


def sweep_command(
    landscape: Path,
    device_name: str,
    m_values: list[int],
    url: str,
    trials: int | None,
    strategy: str | None,
    *extra: str,
) -> list[str]:
    """`tuner sweep --replay` over the landscape's problems (the qwen3.8-27b TP2 shapes)."""
    command = [
        sys.executable,
        "-m",
        "tuner.cli",
        "sweep",
        "--device",
        device_name,
        "--replay",
        str(landscape),
        "--model",
        MODEL,
        "--tp",
        str(TP),
        "--m",
        ",".join(map(str, m_values)),
        "--db",
        url,
        *extra,
    ]
    command += ["--trials", str(trials)] if trials else []
    command += ["--strategy", strategy] if strategy else []
    return command


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_sweep(command: list[str]) -> tuple[float, float, str]:
    """(user + sys CPU seconds of the command and its children, wall seconds, stdout)."""
    before, start = children_cpu_s(), time.perf_counter()
    run = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if run.returncode != 0:
        raise SystemExit(f"sweep failed: {run.stderr.strip() or run.stdout.strip()}")
    return children_cpu_s() - before, time.perf_counter() - start, run.stdout


def with_store(url: str, landscape: Path) -> dict:
    """Run a worker in this process on the planned sweep; its CPU, trials and commits."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    from db import repo
    from db.connection import connect, session_scope
    from tuner.measure.landscape import load_landscape
    from tuner.measure.runner import ReplayRunner
    from tuner.run.worker import WorkerSpec, worker_main

    commits = [0]

    def count(_connection) -> None:
        commits[0] += 1

    event.listen(Engine, "commit", count)
    runner = ReplayRunner(str(landscape), load_landscape(landscape).device_name)
    start = time.process_time()
    worker_main(WorkerSpec(url, sweep_id=1, worker_id="trial-overhead", runner=runner))
    cpu_s = time.process_time() - start
    event.remove(Engine, "commit", count)
    engine = connect(url)
    with session_scope(engine) as session:
        (progress,) = repo.list_sweeps(session, sweep_id=1)
    engine.dispose()
    return {
        "cpu_s": cpu_s,
        "trials": progress.trials_total,
        "tasks": progress.tasks_done,
        "commits": commits[0],
    }


def without_store(landscape_path: Path, strategy: str, trials: int) -> dict:
    """The worker's searches with no store: tasks in the store's order (shapes, M ascending),
    each warm-started from the winners kept before it, searched, re-timed and decided."""
    from tuner.kernels.config import KernelConfig
    from tuner.kernels.dense.space import default_config, vllm_space
    from tuner.measure.noise import decide_winner, retime_interleaved, select_for_retime
    from tuner.run.worker import task_seed
    from tuner.search.registry import get_strategy
    from tuner.search.warm_start import warm_start_for_task

    start = time.process_time()
    landscape = load_landscape(landscape_path)
    read_s = time.process_time() - start
    kept: list[tuple[int, int, int, KernelConfig]] = []
    evaluated = 0
    for n, k, m in sorted(landscape.problems):
        runner = landscape.runner(n, k, m)
        default = default_config(landscape.block_shape)
        done = {default: runner.evaluate(default)}

        def evaluate(config, done=done, runner=runner):
            if config not in done:
                done[config] = runner.evaluate(config)
            return done[config]

        warm = warm_start_for_task(kept, N=n, K=k, M=m, default=default)
        get_strategy(strategy).search(
            evaluate, space=vllm_space(), budget=trials, seed=task_seed(0, n, k, m), warm_start=warm
        )
        evaluated += len(done)
        finalists = select_for_retime(done, default)
        if finalists:
            decision = decide_winner(retime_interleaved(runner.sample_us, finalists), default)
            kept.append((n, k, m, decision.config))
    return {
        "cpu_s": time.process_time() - start,
        "landscape_read_s": read_s,
        "trials": evaluated,
        "tasks": len(landscape.problems),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--landscape", type=Path, default=LANDSCAPE)
    parser.add_argument("--trials", type=int, default=None, help="per task (sweep default)")
    parser.add_argument("--strategy", default=None, help="search strategy (sweep default)")
    parser.add_argument("--out", type=Path, default=None, help="result file (default: dated)")
    args = parser.parse_args()
    from tuner.search.registry import DEFAULT_STRATEGY, DEFAULT_TRIALS

    strategy, trials = args.strategy or DEFAULT_STRATEGY, args.trials or DEFAULT_TRIALS
    landscape = load_landscape(args.landscape)
    m_values = sorted({m for _, _, m in landscape.problems})
    with tempfile.TemporaryDirectory() as folder:
        whole = f"sqlite:///{folder}/sweep.db"
        sweep_cpu_s, sweep_wall_s, _ = run_sweep(
            sweep_command(args.landscape, landscape.device_name, m_values, whole, trials, strategy)
        )
        planned = f"sqlite:///{folder}/worker.db"
        run_sweep(
            sweep_command(
                args.landscape,
                landscape.device_name,
                m_values,
                planned,
                trials,
                strategy,
                "--no-run",
            )
        )
        stored = with_store(planned, args.landscape)
    bare = without_store(args.landscape, strategy, trials)
    per_trial_ms = {
        "with_store": round(1e3 * stored["cpu_s"] / stored["trials"], 3),
        "without_store": round(1e3 * bare["cpu_s"] / bare["trials"], 3),
    }
    per_trial_ms["store"] = round(per_trial_ms["with_store"] - per_trial_ms["without_store"], 3)
    per_trial_ms["sweep"] = round(1e3 * sweep_cpu_s / stored["trials"], 3)
    # Results name the landscape by its path in the repository, never by this host's folders.
    shown = Path(os.path.relpath(args.landscape.resolve(), ROOT))
    report = {
        "benchmark": "trial_overhead",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "landscape": str(shown),
        "strategy": strategy,
        "trials_per_task": trials,
        "python": platform.python_version(),
        "command": " ".join(
            sweep_command(shown, landscape.device_name, m_values, "sqlite:///DB", trials, strategy)[
                1:
            ]
        ),
        "sweep": {"cpu_s": round(sweep_cpu_s, 2), "wall_s": round(sweep_wall_s, 2)},
        "worker_with_store": {
            **stored,
            "cpu_s": round(stored["cpu_s"], 3),
            "commits_per_trial": round(stored["commits"] / stored["trials"], 3),
        },
        "without_store": {
            key: round(value, 3) if isinstance(value, float) else value
            for key, value in bare.items()
        },
        "cpu_ms_per_trial": per_trial_ms,
    }
    print(
        json.dumps(
            {
                key: report[key]
                for key in ("sweep", "worker_with_store", "without_store", "cpu_ms_per_trial")
            }
        )
    )
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    out = args.out or OUT_DIR / f"trial_overhead_{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
