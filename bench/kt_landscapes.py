"""Landscapes from real GPU measurements: Kernel Tuner's brute-forced GEMM cache files, mapped
onto vLLM's six config axes in two documented ways (`landscapes/README.md`).

    git clone https://github.com/AutoTuningAssociation/benchmark_hub /tmp/benchmark_hub
    python bench/kt_landscapes.py --cache-dir \
        "/tmp/benchmark_hub/currently_unused/cachefiles/KernelTuner data/gemm"

Source: AutoTuningAssociation/benchmark_hub (MIT License), commit 8eeb99e7 (2025-05-24),
`currently_unused/cachefiles/KernelTuner data/gemm/{RTX_2080_Ti,RTX_3090,RTX_Titan}.json.gz`:
CLBlast's Xgemm OpenCL kernel (FP32, 4096 x 4096 x 4096) tuned by Kernel Tuner over 17,956
configs per GPU (every config its restrictions allow), 32 timed runs each, recorded 2023-02.
Only the derived landscapes are kept here (bench/landscapes/kt_gemm_*.json), never the raw files.

The kernel is not ours: its parameters (work-group tile MWG x NWG, threads MDIMC x NDIMC,
loading shapes MDIMA, NDIMB, vector widths VWM, VWN, local-memory caching SA, SB) are mapped
onto our axes so that a strategy meets a real GPU's landscape: its invalid configs (about half
of the space), plateaus, isolated optima and noise. Problems are labels, not shapes: N is the
GPU (1: RTX 2080 Ti, 2: RTX 3090, 3: TITAN RTX), K = 4096, and M one of four variants of the
mapping (related landscapes of one GPU, as neighbouring M are), see MAPPINGS.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.landscape_file import landscape_from_results, landscape_json  # noqa: E402
from tuner.core import TrialStatus  # noqa: E402
from tuner.kernels.dense.space import vllm_space  # noqa: E402
from tuner.measure.trial import TrialResult  # noqa: E402

GPUS = {1: "RTX_2080_Ti", 2: "RTX_3090", 3: "RTX_Titan"}  # N -> cache file stem
K_LABEL = 4096
M_VARIANTS = (1, 16, 256, 4096)
KT_KEYS = (
    "MWG",
    "NWG",
    "KWG",
    "MDIMC",
    "NDIMC",
    "MDIMA",
    "NDIMB",
    "KWI",
    "VWM",
    "VWN",
    "STRM",
    "STRN",
    "SA",
    "SB",
    "PRECISION",
)
# Both mappings: the work-group tile is the block tile (BLOCK_SIZE_M 256 has none: invalid).
TILE_M = {16: 16, 32: 32, 64: 64, 128: 128}
TILE_N = {32: 16, 64: 32, 128: 64, 256: 128}
STAGES_VWM = {2: 1, 3: 2, 4: 4, 5: 8}  # num_stages -> VWM (vector width along M)


def _smooth(config, variant: int) -> list[dict[str, int]]:
    """`min`: the fastest of the Kernel Tuner configs a config stands for (a compiler that
    picks the hidden parameters well). num_warps -> threads MDIMC x NDIMC (4: 128, 8: 256),
    num_stages -> VWM, GROUP_SIZE_M 1/16/32/64 -> VWN 1/2/4/8, BLOCK_SIZE_K 64/128 -> SA 0/1;
    hidden (minimised over): MDIMA, NDIMB and the thread shape; the variant M fixes SB
    (M 1, 16: 0; 256, 4096: 1) and whether MDIMC <= NDIMC (M 1, 256) or >= (M 16, 4096)."""
    threads = {4: 128, 8: 256}[config.num_warps]
    sb = int(variant >= 256)
    wide = variant in (1, 256)
    shapes = [
        (mc, nc)
        for mc in (8, 16, 32)
        for nc in (8, 16, 32)
        if mc * nc == threads and (mc <= nc if wide else mc >= nc)
    ]
    return [
        dict(
            MWG=TILE_M[config.BLOCK_SIZE_M],
            NWG=TILE_N[config.BLOCK_SIZE_N],
            MDIMC=mc,
            NDIMC=nc,
            MDIMA=ma,
            NDIMB=nb,
            VWM=STAGES_VWM[config.num_stages],
            VWN={1: 1, 16: 2, 32: 4, 64: 8}[config.GROUP_SIZE_M],
            SA=int(config.BLOCK_SIZE_K == 128),
            SB=sb,
        )
        for mc, nc in shapes
        for ma in (8, 16, 32)
        for nb in (8, 16, 32)
    ]


def _fixed(config, variant: int) -> list[dict[str, int]]:
    """`fixed`: exactly one Kernel Tuner config per config, nothing minimised (a rough
    landscape). num_warps 4/8 -> MDIMC x NDIMC 8x16 / 16x16, BLOCK_SIZE_K 64/128 -> MDIMA =
    NDIMB = 8 / 16, GROUP_SIZE_M 1/16/32/64 -> (SA, SB) (0,0)/(0,1)/(1,0)/(1,1), num_stages ->
    VWM; the variant M fixes VWN (M 1: 1, 16: 2, 256: 4, 4096: 8)."""
    mc, nc = {4: (8, 16), 8: (16, 16)}[config.num_warps]
    load = {64: 8, 128: 16}[config.BLOCK_SIZE_K]
    sa, sb = {1: (0, 0), 16: (0, 1), 32: (1, 0), 64: (1, 1)}[config.GROUP_SIZE_M]
    return [
        dict(
            MWG=TILE_M[config.BLOCK_SIZE_M],
            NWG=TILE_N[config.BLOCK_SIZE_N],
            MDIMC=mc,
            NDIMC=nc,
            MDIMA=load,
            NDIMB=load,
            VWM=STAGES_VWM[config.num_stages],
            VWN={1: 1, 16: 2, 256: 4, 4096: 8}[variant],
            SA=sa,
            SB=sb,
        )
    ]


MAPPINGS = {"min": _smooth, "fixed": _fixed}


def read_cache(path: Path) -> dict[str, list[float]]:
    """Kernel Tuner cache file -> {key of the 15 parameter values: run times in ms}.

    Raises:
        ValueError: not a Kernel Tuner GEMM cache with KT_KEYS.
    """
    body = json.loads(gzip.open(path).read())
    if tuple(body.get("tune_params_keys", ())) != KT_KEYS:
        raise ValueError(f"{path}: not a Kernel Tuner Xgemm cache file")
    return {
        key: entry["times"]
        for key, entry in body["cache"].items()
        if isinstance(entry.get("times"), list)
    }


def kt_key(params: dict[str, int]) -> str:
    full = {"KWG": 32, "KWI": 2, "STRM": 0, "STRN": 0, "PRECISION": 32, **params}
    return ",".join(str(full[name]) for name in KT_KEYS)


def result_of(times_ms: list[float]) -> TrialResult:
    """Median and [p20, p80] of the runs, in microseconds."""
    us = sorted(1e3 * t for t in times_ms)
    quintiles = statistics.quantiles(us, n=5)  # p20, p40, p60, p80
    return TrialResult(TrialStatus.OK, statistics.median(us), quintiles[0], quintiles[3])


def build(mapping: str, caches: dict[int, dict[str, list[float]]]):
    """The landscape of one mapping over the GPUs' caches (unrunnable configs left out)."""
    results = []
    for n, cache in sorted(caches.items()):
        for m in M_VARIANTS:
            for config in vllm_space():
                if config.BLOCK_SIZE_M not in TILE_M:
                    continue
                runs = [
                    cache[key] for key in map(kt_key, MAPPINGS[mapping](config, m)) if key in cache
                ]
                if runs:
                    best = min((result_of(times) for times in runs), key=lambda r: r.latency_us)
                    results.append((n, K_LABEL, m, config, best))
    return landscape_from_results(
        device_name=f"KT_GEMM_{mapping.upper()}",
        environment={
            "gpu_name": "Kernel Tuner Xgemm FP32 4096^3 on RTX 2080 Ti (N=1), "
            "RTX 3090 (N=2), TITAN RTX (N=3); mapping " + mapping,
            "compute_capability": "7.5/8.6/7.5",
            "driver": "",
            "cuda": "",
            "torch": "",
            "triton": "",
            "tuner": "",
            "kernel_hash": "benchmark_hub@8eeb99e7",
        },
        recorded_at=datetime.now(UTC).isoformat(timespec="seconds"),
        space="vllm",
        out_dtype="bfloat16",
        block_shape=(128, 128),
        results=results,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir", type=Path, required=True)
    parser.add_argument("--out-dir", type=Path, default=ROOT / "bench" / "landscapes")
    args = parser.parse_args()
    caches = {n: read_cache(args.cache_dir / f"{stem}.json.gz") for n, stem in GPUS.items()}
    for mapping in MAPPINGS:
        landscape = build(mapping, caches)
        out = args.out_dir / f"kt_gemm_{mapping}.json"
        out.write_text(landscape_json(landscape))
        rows = sum(len(trials) for trials in landscape.problems.values())
        print(
            f"wrote {out}: {len(landscape.problems)} problems, {rows} runnable configs of "
            f"{len(landscape.problems) * len(vllm_space())}"
        )


if __name__ == "__main__":
    main()
