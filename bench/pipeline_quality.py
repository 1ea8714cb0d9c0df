"""Pipeline quality: what the shipped file makes vLLM run, against the exhaustive optimum.

    python bench/pipeline_quality.py                       # the synthetic sm90 landscape
    python bench/pipeline_quality.py --landscape FILE --trials 64 --strategy optuna

`bench/search_quality.py` scores strategies alone. This runs the product end to end on a
landscape: `tuner sweep --replay` with its defaults (strategy, budget, warm starts from the
store, interleaved re-timing of the finalists and the winner rule), then the merge that writes
the vLLM file (never a config slower than the default), and scores, per (N, K, M) of the
landscape, quality = optimum latency_us / recorded latency_us of:
- `fastest_trial`: the fastest trial the search found (before re-timing);
- `decided`: the config the re-timing kept (the store's winner);
- `shipped_file`: the config the merged file holds for that M.
And what the sweep cost (`cost`): tasks, trials stored and measured (pruned ones are free), and
distinct compiles: (config, launch specialization) pairs of the trials that needed the
compiler (all but `invalid`), the binaries a GPU host builds (`specialization_key`: M = 1,
M % 16 == 0 and other M are three binaries of one shape).
`--full-grid`: instead of a landscape file, the SYNTHETIC sm90 model
(`bench/synthetic_landscape.py`) over MODEL TP's shapes and vLLM's 18 M, what a full
`tuner sweep` of that model tunes.
Writes bench/results/pipeline_quality_<device_name>.json.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.landscape_file import landscape_json, optimum  # noqa: E402
from tuner.kernels.config import KernelConfig  # noqa: E402
from tuner.kernels.dense.space import default_config  # noqa: E402
from tuner.measure.landscape import Landscape, load_landscape  # noqa: E402

LANDSCAPE = ROOT / "bench" / "landscapes" / "synthetic_sm90.json"
MODEL, TP = "qwen3.8-27b", 2  # the five shapes of the recorded landscapes

Picked = dict[tuple[int, int, int], KernelConfig]


def score(landscape: Landscape, picked: Picked) -> dict[str, float]:
    """Geomean and min over the landscape's problems of optimum / picked latency_us.

    A picked config that is not ok in the landscape scores 0.

    Raises:
        KeyError: a problem of the landscape without a picked config.
    """
    ratios = []
    for key in sorted(landscape.problems):
        runner = landscape.runner(*key)
        _, best = optimum(runner)
        chosen = runner.evaluate(picked[key])
        ratios.append(best.latency_us / chosen.latency_us if chosen.ok else 0.0)
    positive = min(ratios) > 0
    geomean = math.exp(sum(map(math.log, ratios)) / len(ratios)) if positive else 0.0
    return {"geomean": round(geomean, 4), "min": round(min(ratios), 4), "problems": len(ratios)}


def sweep(
    landscape_path: Path,
    landscape: Landscape,
    url: str,
    *,
    trials: int | None,
    strategy: str | None,
    configs: Path | None = None,
) -> tuple[subprocess.CompletedProcess, float]:
    """`tuner sweep --replay` over the landscape's (N, K) and M into the store at `url`."""
    m_values = sorted({m for _, _, m in landscape.problems})
    command = [
        sys.executable,
        "-m",
        "tuner.cli",
        "sweep",
        "--device",
        landscape.device_name,
        "--replay",
        str(landscape_path),
        "--model",
        MODEL,
        "--tp",
        str(TP),
        "--m",
        ",".join(map(str, m_values)),
        "--db",
        url,
        "--no-publish",
    ]
    command += ["--trials", str(trials)] if trials else []
    command += ["--strategy", strategy] if strategy else []
    command += ["--configs", str(configs)] if configs else []
    start = time.perf_counter()
    run = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if run.returncode != 0:
        raise SystemExit(f"sweep failed: {run.stderr.strip() or run.stdout.strip()}")
    return run, time.perf_counter() - start


def picks(url: str, landscape: Landscape) -> tuple[Picked, Picked, Picked, dict]:
    """(fastest trial, decided winner, shipped file entry) per (N, K, M), and the sweep row."""
    from db import repo
    from db.connection import open_store, session_scope
    from tuner.files.merge import merge_shape
    from tuner.kernels.registry import DEFAULT_FAMILY

    engine = open_store(url)
    try:
        with session_scope(engine) as session:  # replayed trials are not of the current kernel
            winners = repo.winners(session, device_name=landscape.device_name)
            fastest_rows = repo.task_winners(
                session,
                device_name=landscape.device_name,
                block_shape=landscape.block_shape,
                out_dtype=landscape.out_dtype,
                family=DEFAULT_FAMILY,
            )
            (info,) = repo.list_sweeps(session, sweep_id=1)
    finally:
        engine.dispose()
    fastest = {(r.N, r.K, r.M): KernelConfig.from_dict(r.config) for r in fastest_rows}
    decided = {(r.N, r.K, r.M): KernelConfig.from_dict(r.config) for r in winners}
    shipped: Picked = {}
    by_shape: dict[tuple[int, int], list] = {}
    for row in winners:
        by_shape.setdefault((row.N, row.K), []).append(row)
    for (n, k), rows in by_shape.items():
        merged = merge_shape(
            rows,
            m_requested=sorted(r.M for r in rows),
            default=default_config(landscape.block_shape),
        )
        shipped.update({(n, k, m): KernelConfig.from_dict(c) for m, c in merged.configs.items()})
    return fastest, decided, shipped, {"strategy": info.strategy, "trials": info.budget}


def int_class(value: int) -> str:
    """How Triton's launcher specializes an integer argument (JITFunction's specialization,
    triton/runtime/jit.py): equal to 1, divisible by 16, or neither; i64 past int32."""
    kind = "1" if value == 1 else ("d16" if value % 16 == 0 else "any")
    return kind if -(2**31) <= value < 2**31 else kind + ":i64"


def specialization_key(M: int, N: int, K: int, block_shape: tuple[int, int]) -> str:
    """The part of a dense launch (M, N, K, block_shape) that selects a different binary: each
    integer argument (M, N, K, group_n, group_k and the strides, which equal K, N or
    ceil(K / group_k)) by `int_class`; so M = 1, M % 16 == 0 and other M are three binaries of
    one shape."""
    group_n, group_k = block_shape
    values = {"M": M, "N": N, "K": K, "gn": group_n, "gk": group_k, "kg": -(-K // group_k)}
    return ",".join(f"{name}={int_class(value)}" for name, value in values.items())


def sweep_cost(url: str, device_name: str) -> dict[str, int]:
    """What the sweeps of `device_name` in the store at `url` cost.

    Returns:
        tasks: distinct (N, K, M); trials_stored: every trial; trials_measured: those not pruned
        before launch (invalid, compile_error, out_of_resources: they cost no GPU time);
        distinct_compiles: distinct (config, `specialization_key`) over the trials other than
        `invalid` (a static constraint: never compiled).
    """
    from bench.store_trials import device_trials
    from db.connection import open_store, session_scope
    from tuner.search.base import PRUNED

    engine = open_store(url)
    try:
        with session_scope(engine) as session:
            rows = device_trials(session, device_name=device_name)
    finally:
        engine.dispose()
    pruned = {str(status) for status in PRUNED}
    compiles = {
        (specialization_key(r.M, r.N, r.K, r.block_shape), tuple(r.config.items()))
        for r in rows
        if r.status != "invalid"
    }
    return {
        "tasks": len({(r.N, r.K, r.M) for r in rows}),
        "trials_stored": len(rows),
        "trials_measured": sum(r.status not in pruned for r in rows),
        "distinct_compiles": len(compiles),
    }


def full_grid_landscape(folder: Path) -> Path:
    """The SYNTHETIC sm90 landscape of MODEL TP's shapes x vLLM's 18 M, written in `folder`
    (seeded as bench/synthetic_landscape.py's; resources from its formula where no compile
    cache is present, so its timings at the committed file's 6 M may differ from that file's)."""
    import importlib.util

    from tuner.core import VLLM_M_GRID
    from tuner.inputs.shapes import load_shapes

    spec = importlib.util.spec_from_file_location(
        "synthetic_landscape", ROOT / "bench" / "synthetic_landscape.py"
    )
    model = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("synthetic_landscape", model)  # its dataclasses look their module up
    spec.loader.exec_module(model)
    landscape = model.build(load_shapes(MODEL, TP).pairs(), VLLM_M_GRID, model.SEED)
    path = folder / "full_grid.json"
    path.write_text(landscape_json(landscape))
    return path


def main() -> None:
    """Sweep the landscape, merge, score, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--landscape", type=Path, default=LANDSCAPE)
    parser.add_argument("--trials", type=int, default=None, help="default: tuner sweep's")
    parser.add_argument("--strategy", default=None, help="default: tuner sweep's")
    parser.add_argument(
        "--configs",
        type=Path,
        default=None,
        help="JSON list of candidates (default: vLLM's 1,280-config space)",
    )
    parser.add_argument(
        "--full-grid",
        action="store_true",
        help="the synthetic model over vLLM's 18 M instead of --landscape",
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as folder:
        path = full_grid_landscape(Path(folder)) if args.full_grid else args.landscape
        landscape = load_landscape(path)
        url = f"sqlite:///{folder}/pipeline.db"
        run, wall_s = sweep(
            path, landscape, url, trials=args.trials, strategy=args.strategy, configs=args.configs
        )
        fastest, decided, shipped, info = picks(url, landscape)
        cost = sweep_cost(url, landscape.device_name)
    result = {
        "landscape": "full grid (synthetic model, vLLM's 18 M)"
        if args.full_grid
        else args.landscape.name,
        "device_name": landscape.device_name,
        **info,
        "fastest_trial": score(landscape, fastest),
        "decided": score(landscape, decided),
        "shipped_file": score(landscape, shipped),
        "cost": cost,
        "sweep_wall_s": round(wall_s, 1),
        "sweep_output": run.stdout.strip().splitlines()[-2:],
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join(["python", "bench/pipeline_quality.py", *sys.argv[1:]]),
    }
    out = args.out or ROOT / "bench" / "results" / (
        f"pipeline_quality_{landscape.device_name}.json"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    for name in ("fastest_trial", "decided", "shipped_file"):
        print(f"{name:14s} geomean {result[name]['geomean']:.4f}  min {result[name]['min']:.4f}")
    print(
        f"{info['strategy']}, {info['trials']} trials per task; {cost['tasks']} tasks, "
        f"{cost['trials_measured']} trials measured ({cost['trials_stored']} stored), "
        f"{cost['distinct_compiles']} distinct compiles; sweep wall {wall_s:.1f} s; wrote {out}"
    )


if __name__ == "__main__":
    main()
