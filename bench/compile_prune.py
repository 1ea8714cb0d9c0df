"""Compile every config of vLLM's space for each architecture and count what pruning rejects.

    python bench/compile_prune.py                  # defaults below; writes bench/results/*.json

No GPU needed: Triton compiles for the target on the CPU (tuner.measure.compile); every run
compiles every config again (ptxas's log is read from a fresh compile).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tuner.kernels.dense.space import default_config, vllm_space  # noqa: E402
from tuner.kernels.gpus import MAX_SHARED_BYTES  # noqa: E402
from tuner.kernels.shape import Shape  # noqa: E402
from tuner.measure.compile import compile_infos, launch_problem  # noqa: E402

ARCHS = (89, 90)  # compute capabilities to compile for: Ada (L20, L40S), Hopper (H100, H200)
N, K = 5120, 3072  # a Qwen3.8-27B TP2 shape (shapes/qwen3.8-27b.toml)
# Any M divisible by 16 gives the same binary
# (bench/pipeline_quality.py's specialization_key).
M = 4096
BLOCK_SHAPE = (128, 128)  # [group_n, group_k] of the weight scales
OUT_DTYPE = "bfloat16"  # what serving uses
WORKERS = None  # compile processes; None: CPU count minus one
OUT_DIR = Path(__file__).resolve().parent / "results"  # where the JSON result goes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", type=int, action="append", help="repeat; default 89 and 90")
    parser.add_argument("--m", type=int, default=M)
    parser.add_argument("--workers", type=int, default=WORKERS)
    parser.add_argument("--limit", type=int, default=None, help="only the first LIMIT configs")
    parser.add_argument("--out-dir", type=Path, default=OUT_DIR)
    args = parser.parse_args()
    configs = vllm_space()[: args.limit]
    report = {
        "benchmark": "compile_prune",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": platform.node(),
        "cpu_count": os.cpu_count(),
        "versions": {name: metadata.version(name) for name in ("triton", "torch")},
        "N": N,
        "K": K,
        "M": args.m,
        "out_dtype": OUT_DTYPE,
        "configs": len(configs),
        "archs": {},
    }
    for arch in args.arch or ARCHS:
        start = time.perf_counter()
        infos = compile_infos(
            dict.fromkeys(configs, args.m),
            arch=arch,
            shape=Shape(N, K, BLOCK_SHAPE),
            out_dtype=OUT_DTYPE,
            workers=args.workers,
        )
        wall_s = time.perf_counter() - start
        problems = {config: launch_problem(info) for config, info in infos.items()}
        rejected = [p for p in problems.values() if p is not None]
        kinds = Counter(
            p.error.split(":")[1].split()[0] if "pruned" in p.error else "compile" for p in rejected
        )
        fresh = [info.compile_s for info in infos.values() if info.compile_s > 0]
        spilling = sum(
            1
            for config, info in infos.items()
            if problems[config] is None and (info.spill_bytes or 0) > 0
        )
        report["archs"][f"sm{arch}"] = {
            "max_shared_bytes": MAX_SHARED_BYTES[arch],
            "rejected": len(rejected),
            "runnable": len(configs) - len(rejected),
            "rejected_by": dict(kinds),
            "runnable_with_spills": spilling,
            "default_accepted": problems.get(default_config(BLOCK_SHAPE)) is None,
            "compiled_now": len(fresh),
            "wall_s": round(wall_s, 1),
            "compile_s_per_config_mean": round(statistics.fmean(fresh), 3) if fresh else None,
            "compile_s_per_config_median": round(statistics.median(fresh), 3) if fresh else None,
        }
        print(
            f"sm{arch}: {len(rejected)} of {len(configs)} rejected {dict(kinds)}; "
            f"{len(fresh)} compiled in {wall_s:.0f} s wall",
            flush=True,
        )
    args.out_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = args.out_dir / f"compile_prune_{stamp}.json"
    path.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
