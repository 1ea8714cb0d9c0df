"""Build a landscape from Kernel Tuner's brute-forced timings of a dedispersion kernel on three
NVIDIA and three AMD GPUs (the FAIR Benchmark Hub), mapped onto vLLM's six config axes.

    python bench/dedisp_landscapes.py --cache-dir DIR   # DIR holds {A100,...,W7800}.json.gz

Source: https://github.com/AutoTuningAssociation/benchmark_hub (MIT License), commit 8eeb99e7,
`cachefiles/dedispersion_milo/<GPU>.json.gz` (kernel `dedispersion_kernel`, problem size
25000 x 2048 x 1; parameters and restrictions in `kernels/dedispersion_milo.json`). Not our
kernel and not a GEMM: the landscape tests search on real timings of other GPUs (Ampere and
CDNA2 / RDNA2 / RDNA3), never configs for our kernel. Mapping (bench/landscapes/README.md):
BLOCK_SIZE_M 16/32/64/128/256 -> block_size_x 2/4/8/16/32, BLOCK_SIZE_N 32/64/128/256 ->
block_size_y 32/64/128/256, BLOCK_SIZE_K 64/128 -> tile_stride_x 0/1, GROUP_SIZE_M 1/16/32/64 ->
tile_size_x 1/2/3/4, num_warps 4/8 -> tile_stride_y 0/1, num_stages 2/3/4/5 -> tile_size_y
1/2/4/8 (M 1) or 1/2/3/4 (M 16, a related landscape of the same GPU, as neighbouring M are);
block_size_z and loop_unroll_factor_channel have one value each. Problems are labels: N is the
GPU (GPUS), K = 4096, M the variant.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from conv_landscapes import GPUS, build, read_cache, write  # noqa: E402

KT_KEYS = (
    "block_size_x",
    "block_size_y",
    "block_size_z",
    "tile_size_x",
    "tile_size_y",
    "tile_stride_x",
    "tile_stride_y",
    "loop_unroll_factor_channel",
)
BLOCK_X = {16: 2, 32: 4, 64: 8, 128: 16, 256: 32}  # BLOCK_SIZE_M -> block_size_x
TILE_X = {1: 1, 16: 2, 32: 3, 64: 4}  # GROUP_SIZE_M -> tile_size_x
TILE_Y = {1: {2: 1, 3: 2, 4: 4, 5: 8}, 16: {2: 1, 3: 2, 4: 3, 5: 4}}  # M -> num_stages -> y


def kt_keys(config, variant: int) -> list[str]:
    """The cache key a config stands for at an M variant (one: no hidden parameter)."""
    values = {
        "block_size_x": BLOCK_X[config.BLOCK_SIZE_M],
        "block_size_y": config.BLOCK_SIZE_N,
        "block_size_z": 1,
        "tile_size_x": TILE_X[config.GROUP_SIZE_M],
        "tile_size_y": TILE_Y[variant][config.num_stages],
        "tile_stride_x": int(config.BLOCK_SIZE_K == 128),
        "tile_stride_y": int(config.num_warps == 8),
        "loop_unroll_factor_channel": 0,
    }
    return [",".join(str(values[key]) for key in KT_KEYS)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir", type=Path, required=True)
    parser.add_argument(
        "--out", type=Path, default=ROOT / "bench" / "landscapes" / "kt_dedisp.json"
    )
    args = parser.parse_args()
    caches = {n: read_cache(args.cache_dir / f"{gpu}.json.gz", KT_KEYS) for n, gpu in GPUS.items()}
    write(
        build(caches, kt_keys, "KT_DEDISP", "Kernel Tuner dedispersion_kernel 25000 x 2048"),
        args.out,
    )


if __name__ == "__main__":
    main()
