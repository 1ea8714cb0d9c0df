"""Build a landscape from Kernel Tuner's brute-forced timings of a 2-D convolution on three
NVIDIA and three AMD GPUs (the FAIR Benchmark Hub), mapped onto vLLM's six config axes.

    python bench/conv_landscapes.py --cache-dir DIR   # DIR holds {A100,...,W7800}.json.gz

Source: https://github.com/AutoTuningAssociation/benchmark_hub (MIT License), commit 8eeb99e7,
`cachefiles/convolution_milo/<GPU>.json.gz` (kernel `convolution_kernel`, 4096 x 4096 image,
15 x 15 filter; parameters and restrictions in `kernels/convolution_milo.json`). The kernel is
not ours and not a GEMM: the landscape tests search on real timings of other GPUs (Ampere and
CDNA2 / RDNA2 / RDNA3), never configs for our kernel. Mapping (bench/landscapes/README.md):
BLOCK_SIZE_M 16/32/64/128/256 -> block_size_y 1/2/4/8/16, BLOCK_SIZE_N 32/64/128/256 ->
block_size_x 32/64/128/256, BLOCK_SIZE_K 64/128 -> read_only 0/1, GROUP_SIZE_M 1/16/32/64 ->
tile_size_x 1/2/3/4, num_warps 4/8 -> use_shmem 0/1, num_stages 2/3/4/5 -> tile_size_y 1/2/3/4;
use_padding, hidden, takes the faster of its two values (the restrictions allow padding only
for block_size_x not a multiple of 32, so never here). M is the variant: M 1 as above, M 16
with the roles of tile_size_x and tile_size_y swapped (GROUP_SIZE_M -> tile_size_y, num_stages
-> tile_size_x), a related landscape of the same GPU as neighbouring M are. Problems are
labels: N is the GPU (GPUS), K = 4096, M the variant.
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

GPUS = {1: "A100", 2: "A4000", 3: "A6000", 4: "MI250X", 5: "W6600", 6: "W7800"}  # N -> file
K_LABEL = 4096
VARIANTS = (1, 16)  # M labels: 16 swaps the roles of tile_size_x and tile_size_y
KT_KEYS = (
    "block_size_x",
    "block_size_y",
    "tile_size_x",
    "tile_size_y",
    "read_only",
    "use_padding",
    "use_shmem",
    "use_cmem",
    "filter_height",
    "filter_width",
)
BLOCK_Y = {16: 1, 32: 2, 64: 4, 128: 8, 256: 16}  # BLOCK_SIZE_M -> block_size_y
TILE_X = {1: 1, 16: 2, 32: 3, 64: 4}  # GROUP_SIZE_M -> tile_size_x


def kt_keys(config, variant: int) -> list[str]:
    """The cache keys a config stands for at an M variant (one per use_padding value)."""
    tiles = (TILE_X[config.GROUP_SIZE_M], config.num_stages - 1)
    tile_x, tile_y = tiles if variant == 1 else tiles[::-1]
    values = {
        "block_size_x": config.BLOCK_SIZE_N,
        "block_size_y": BLOCK_Y[config.BLOCK_SIZE_M],
        "tile_size_x": tile_x,
        "tile_size_y": tile_y,
        "read_only": int(config.BLOCK_SIZE_K == 128),
        "use_shmem": int(config.num_warps == 8),
        "use_cmem": 1,
        "filter_height": 15,
        "filter_width": 15,
    }
    return [",".join(str({**values, "use_padding": pad}[key]) for key in KT_KEYS) for pad in (0, 1)]


def read_cache(path: Path, keys: tuple[str, ...] = KT_KEYS) -> dict[str, list[float]]:
    """Kernel Tuner cache file -> {key: run times in ms} of the configs that ran.

    Raises:
        ValueError: not a cache whose tune_params_keys are `keys`.
    """
    body = json.loads(gzip.open(path).read())
    if tuple(body.get("tune_params_keys", ())) != keys:
        raise ValueError(
            f"{path}: not a Kernel Tuner cache file of {body.get('kernel_name')} "
            f"with the parameters {', '.join(keys)}"
        )
    return {
        key: entry["times"]
        for key, entry in body["cache"].items()
        if isinstance(entry.get("times"), list) and isinstance(entry.get("time"), float)
    }


def result_of(times_ms: list[float]) -> TrialResult:
    """Median and [p20, p80] of the runs, in microseconds."""
    us = sorted(1e3 * t for t in times_ms)
    quintiles = statistics.quantiles(us, n=5)
    return TrialResult(TrialStatus.OK, statistics.median(us), quintiles[0], quintiles[3])


def build(
    caches: dict[int, dict[str, list[float]]],
    keys_of=kt_keys,
    device_name="KT_CONV",
    kernel="Kernel Tuner convolution_kernel 4096^2, 15x15 filter",
):
    """The landscape over the GPUs' caches (configs with no cache entry left out: invalid).

    Args:
        caches: N label -> `read_cache` of that GPU.
        keys_of: (config, M variant) -> the cache keys the config stands for (the fastest
            of them is its timing).
        device_name: the landscape's device name.
        kernel: what was timed, for the landscape's gpu_name.
    """
    results = []
    for n, cache in sorted(caches.items()):
        for m in VARIANTS:
            for config in vllm_space():
                runs = [result_of(cache[key]) for key in keys_of(config, m) if key in cache]
                if runs:
                    results.append((n, K_LABEL, m, config, min(runs, key=lambda r: r.latency_us)))
    return landscape_from_results(
        device_name=device_name,
        environment={
            "gpu_name": f"{kernel}, on " + ", ".join(f"{GPUS[n]} (N={n})" for n in sorted(caches)),
            "compute_capability": "8.0/8.6/8.6/gfx90a/gfx1032/gfx1100",
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


def write(landscape, out: Path) -> None:
    """Write the landscape to `out` and say how many of its configs are runnable."""
    out.write_text(landscape_json(landscape))
    rows = sum(len(trials) for trials in landscape.problems.values())
    print(
        f"wrote {out}: {len(landscape.problems)} problems, {rows} runnable configs of "
        f"{len(landscape.problems) * len(vllm_space())}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "landscapes" / "kt_conv.json")
    args = parser.parse_args()
    caches = {n: read_cache(args.cache_dir / f"{gpu}.json.gz") for n, gpu in GPUS.items()}
    write(build(caches), args.out)


if __name__ == "__main__":
    main()
