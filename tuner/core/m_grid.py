"""The M grids of vLLM's block-FP8 config files: the batch sizes vLLM tunes and those every
file must carry."""

from __future__ import annotations

# vLLM's tuning script default batch sizes (benchmarks/kernels/benchmark_w8a8_block_fp8.py, main).
VLLM_M_GRID: tuple[int, ...] = (
    1,
    2,
    4,
    8,
    16,
    24,
    32,
    48,
    64,
    96,
    128,
    256,
    512,
    1024,
    1536,
    2048,
    3072,
    4096,
)
# M values every file should carry: decode (1), small batches (16, 32), prefill (2048, 4096).
REQUIRED_M: tuple[int, ...] = (1, 16, 32, 2048, 4096)
