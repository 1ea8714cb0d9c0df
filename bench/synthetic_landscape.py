"""SYNTHETIC landscape: an analytic performance model of the block-FP8 GEMM on an sm90-like GPU.

    python bench/synthetic_landscape.py        # writes bench/landscapes/synthetic_sm90.json

This is not a measurement. It stands in for a recorded GPU landscape so that search strategies
can be benchmarked on the CPU; the real yardstick is a landscape recorded on a GPU with
`bench/record_landscape.py` (bench/landscapes/README.md). The model has the effects that shape the
real landscape: DRAM traffic with tile re-reads moderated by GROUP_SIZE_M's L2 reuse, latency-
bound bandwidth (bytes in flight from num_stages and occupancy), tensor-core time with padding
waste and per-tile efficiency, the per-K-tile scale epilogue, wave quantization over the SMs,
occupancy from shared memory and registers, spills, and seeded multiplicative noise.
Shared memory, registers and spills come from the formula num_stages * (BLOCK_SIZE_M *
BLOCK_SIZE_K + BLOCK_SIZE_K * BLOCK_SIZE_N) bytes (what Triton 3.9 allocates on sm90) and an
accumulator-size estimate.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import random
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.landscape_file import landscape_from_results, landscape_json  # noqa: E402
from tuner.core import TrialStatus  # noqa: E402
from tuner.kernels.config import KernelConfig  # noqa: E402
from tuner.kernels.dense.space import vllm_space  # noqa: E402
from tuner.measure.landscape import Landscape  # noqa: E402
from tuner.measure.trial import TrialResult  # noqa: E402

DEVICE_NAME = "SYNTHETIC_SM90"  # never a real GPU's key, so it cannot mix with measurements
MODEL = "qwen3.8-27b"  # shapes/ key: the five Qwen3.8-27B-FP8 TP2 shapes
TP = 2  # tensor-parallel size of those shapes
M_VALUES = (1, 16, 32, 256, 2048, 4096)  # decode, small and large prefill batches
SEED = 0  # seed of the noise
NOISE = 0.015  # sigma of the multiplicative log-normal noise per (problem, config)
OUT = Path(__file__).resolve().parent / "landscapes" / "synthetic_sm90.json"  # output file

# The modelled GPU: H100/H200 SXM class, compute capability 9.0.
SMS = 132  # streaming multiprocessors (H100/H200 SXM)
DRAM_BW = 4.3e12  # bytes/s: about 90% of the H200's 4.8 TB/s HBM3e peak (NVIDIA's H200 datasheet)
L2_BW = 11e12  # bytes/s of L2 hits
L2_BYTES = 50 * 2**20  # L2 capacity
MEM_LATENCY_S = 0.6e-6  # DRAM latency under load, for Little's law
TC_FLOPS = 1979e12 * 0.7 / SMS  # FP8 dense tensor-core rate per SM, 70% of the datasheet peak
FP32_FLOPS = 66.9e12 / SMS  # CUDA-core fp32 rate per SM (datasheet), for the scale epilogue
SMEM_FILL_BW = 128 * 1.75e9  # bytes/s one SM moves into shared memory (128 B/clock)
SMEM_PER_SM = 228 * 1024  # shared memory per SM; 1 KiB of it is reserved per block
SMEM_PER_BLOCK = 227 * 1024  # opt-in maximum per block (CUDA programming guide, 9.0)
REGS_PER_SM = 64 * 1024  # 32-bit registers per SM, also the maximum per block
WARPS_PER_SM = 64  # 2,048 threads
LAUNCH_S = 2.5e-6  # launch overhead and kernel tail, as a CUDA-graph replay sees it


@dataclass(frozen=True)
class Resources:
    """What one program of a config needs: shared memory bytes, registers per thread, spills."""

    shared_bytes: int
    n_regs: int
    spill_bytes: int


def estimate_resources(config: KernelConfig) -> Resources:
    """The formula: num_stages tiles of shared
    memory; registers for the accumulator and the dot result it adds (2 x BLOCK_SIZE_M x
    BLOCK_SIZE_N fp32 over the threads) plus addressing; what passes 255 spills."""
    tile_bytes = config.BLOCK_SIZE_K * (config.BLOCK_SIZE_M + config.BLOCK_SIZE_N)
    accumulator = config.BLOCK_SIZE_M * config.BLOCK_SIZE_N / (32 * config.num_warps)
    wanted = 40 + 2 * accumulator
    return Resources(
        config.num_stages * tile_bytes + 1024,
        int(min(255, wanted)),
        int(max(0.0, wanted - 255) * 4 * 32),
    )


def latency_us(config: KernelConfig, M: int, N: int, K: int, res: Resources) -> float | None:
    """Modelled latency of one launch in microseconds, or None when the config cannot launch."""
    bm, bn, bk = config.BLOCK_SIZE_M, config.BLOCK_SIZE_N, config.BLOCK_SIZE_K
    warps, stages = config.num_warps, config.num_stages
    regs_per_block = math.ceil(res.n_regs * 32 / 256) * 256 * warps
    if res.shared_bytes > SMEM_PER_BLOCK or regs_per_block > REGS_PER_SM:
        return None
    blocks = min(
        SMEM_PER_SM // (res.shared_bytes + 1024),
        REGS_PER_SM // regs_per_block,
        WARPS_PER_SM // warps,
        32,
    )
    tiles_m, tiles_n, k_tiles = -(-M // bm), -(-N // bn), -(-K // bk)
    programs = tiles_m * tiles_n
    per_sm = -(-programs // SMS)  # wave quantization: programs each SM runs
    resident = min(blocks, per_sm)  # programs sharing an SM at once
    tile_bytes = bk * (bm + bn)

    # One K-tile of one program. Tensor cores: wgmma wants 64 rows per warpgroup (smaller
    # tiles use mma.sync); tiles with little reuse are fed too slowly from shared memory; warps
    # with too little of the tile idle. The scales are applied on the CUDA cores once per
    # K-tile, partly overlapped. Loads into shared memory are limited by the SM's L1 bandwidth.
    mma_eff = 0.8 if bm < 64 or bm < 16 * warps else 1.0
    reuse_eff = min(1.0, (2 * bm * bn / (bm + bn)) / 64)
    warp_eff = min(1.0, bm * bn / (warps * 256)) ** 0.5
    mma_s = 2 * bm * bn * bk / (TC_FLOPS * mma_eff * reuse_eff * warp_eff)
    scale_s = 3 * bm * bn / FP32_FLOPS * (0.35 if warps == 4 else 0.2)
    work_s = max(mma_s + scale_s, tile_bytes / SMEM_FILL_BW)
    work_s *= 1 + min(2.0, 0.15 * res.spill_bytes / 1024)
    # A program waits for data when num_stages - 1 tiles in flight do not cover the latency;
    # programs resident together hide each other's waits.
    wait_s = MEM_LATENCY_S / max(1, stages - 1) / resident
    k_tile_s = (work_s**4 + wait_s**4) ** 0.25
    edge_s = (MEM_LATENCY_S + bm * bn * 2 / (DRAM_BW / SMS)) / resident
    sm_s = per_sm * (k_tiles * k_tile_s + edge_s)

    # DRAM traffic: the programs resident at once cover rows x cols tiles; A is re-read once per
    # column of tiles they do not share, B once per row. GROUP_SIZE_M rows are walked together.
    concurrent = min(programs, SMS * blocks)
    group = min(config.GROUP_SIZE_M, tiles_m)
    rows = min(tiles_m, max(group, concurrent / tiles_n))
    cols = max(1.0, min(tiles_n, concurrent / rows))
    l2_fit = min(1.0, 0.5 * L2_BYTES / ((rows * bm + cols * bn) * K))
    rows, cols = max(1.0, rows * l2_fit), max(1.0, cols * l2_fit)
    dram_bytes = M * K * tiles_n / cols + N * K * tiles_m / rows + M * N * 2
    dram_bytes += (M * tiles_n + N / 128 * tiles_m) * k_tiles * 4  # fp32 scales
    memory_s = max(dram_bytes / DRAM_BW, programs * k_tiles * tile_bytes / L2_BW)

    total_s = LAUNCH_S + (sm_s**4 + memory_s**4) ** 0.25
    return total_s * 1e6


def noise(config: KernelConfig, M: int, N: int, K: int, seed: int) -> float:
    """Seeded multiplicative log-normal noise, the same for the same (problem, config, seed)."""
    text = f"{seed}:{N}:{K}:{M}:{config.short()}"
    rng = random.Random(int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big"))
    return math.exp(rng.gauss(0.0, NOISE))


def trial(config: KernelConfig, M: int, N: int, K: int, res: Resources, seed: int) -> TrialResult:
    """The synthetic trial of one config: ok with latencies, or out_of_resources."""
    base = latency_us(config, M, N, K, res)
    if base is None:
        return TrialResult(
            TrialStatus.OUT_OF_RESOURCES,
            error=f"shared memory {res.shared_bytes} bytes or registers exceed sm90",
        )
    value = round(base * noise(config, M, N, K, seed), 3)
    return TrialResult(TrialStatus.OK, value, round(value * 0.996, 3), round(value * 1.004, 3))


def build(shapes: tuple[tuple[int, int], ...], m_values: tuple[int, ...], seed: int) -> Landscape:
    """The synthetic landscape of every config for every (N, K) x M."""
    import tuner

    space = vllm_space()
    resources = {config: estimate_resources(config) for config in space}
    source = "formula"
    model_hash = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]
    results = [
        (n, k, m, config, trial(config, m, n, k, resources[config], seed))
        for n, k in shapes
        for m in m_values
        for config in space
    ]
    environment = {
        "gpu_name": f"SYNTHETIC analytic sm90 model, not a measurement; resources: {source}",
        "compute_capability": "9.0",
        "driver": "synthetic",
        "cuda": "synthetic",
        "torch": "synthetic",
        "triton": "synthetic",
        "tuner": tuner.__version__,
        "kernel_hash": f"synthetic-model-{model_hash}",
    }
    return landscape_from_results(
        device_name=DEVICE_NAME,
        environment=environment,
        recorded_at=datetime.now(UTC).isoformat(timespec="seconds"),
        space="vllm",
        out_dtype="bfloat16",
        block_shape=(128, 128),
        results=results,
    )


def main() -> None:
    from tuner.inputs.shapes import load_shapes

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args()
    landscape = build(load_shapes(MODEL, TP).pairs(), M_VALUES, args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(landscape_json(landscape))
    print(
        f"wrote {args.out} ({args.out.stat().st_size / 2**20:.1f} MiB, "
        f"{len(landscape.problems)} problems); {landscape.environment['gpu_name']}"
    )


if __name__ == "__main__":
    main()
