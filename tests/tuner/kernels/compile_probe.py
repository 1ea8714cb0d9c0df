"""Run in a process without TRITON_INTERPRET (test_target.py): compile the dense and fused-MoE
kernels for GPU targets without a GPU, and doctor's pairs (our kernel and a stand-in vLLM's copy
of it, each launched by its own host code). Prints one JSON object."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import torch
import triton

from tests.standin_vllm import build_standin
from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.family import DENSE, VLLM_DENSE
from tuner.kernels.dense.space import default_config
from tuner.kernels.moe.family import MOE
from tuner.kernels.moe.space import default_config as moe_default
from tuner.kernels.shape import Shape

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
from compiled import compile_dense_pair, compile_moe_pairs, same_code  # noqa: E402


def main() -> None:
    if "nvidia" not in triton.backends.backends:
        print(json.dumps({"skip": "this Triton has no NVIDIA backend"}))
        return
    too_big = KernelConfig(128, 128, 128, 1, 4, 5)  # 5 stages of 32 KiB: over 99 KiB
    dense_shape, bf16 = Shape(576, 7168, (128, 128)), torch.bfloat16
    sys.path.insert(0, str(build_standin(Path(tempfile.mkdtemp()) / "site")))
    pairs = [compile_dense_pair(VLLM_DENSE.kernel(), default_config(), 90, M=1, N=256, K=512)]
    small = Shape(256, 512, (128, 128), (("E", 8), ("top_k", 2)))
    pairs += compile_moe_pairs(moe_default(1), 90, shape=small, M=1)
    shared = {
        "too-big-sm89": DENSE.compile_for_target(
            too_big, 89, shape=dense_shape, M=64, out_dtype=bf16
        ),
        # the launches the MoE pairs compiled just before: from Triton's cache
        "moe-sm90": MOE.compile_for_target(moe_default(1), 90, shape=small, M=1, out_dtype=bf16),
    }
    result = {
        "pairs": [[ours.shared, same_code(ours, theirs)] for ours, theirs in pairs],
        "shared": {name: kernel.metadata.shared for name, kernel in shared.items()},
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
