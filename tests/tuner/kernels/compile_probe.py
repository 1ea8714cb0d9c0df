"""Run in a process without TRITON_INTERPRET (test_target.py): compile the dense and fused-MoE
kernels for GPU targets without a GPU, and doctor's pairs (our kernel and a stand-in vLLM's copy
of it, each launched by its own host code). Prints one JSON object."""

from __future__ import annotations

import importlib
import json
import sys
import tempfile
from pathlib import Path

import torch
import triton

from tests.standin_vllm import build_standin
from tuner.kernels.config import KernelConfig
from tuner.kernels.dense import kernel as dense
from tuner.kernels.dense.family import VLLM_DENSE
from tuner.kernels.dense.space import default_config
from tuner.kernels.dense.workload import compile_dense_pair, compile_for_target
from tuner.kernels.moe.family import MOE, VLLM_MOE
from tuner.kernels.moe.space import default_config as moe_default
from tuner.kernels.moe.workload import compile_moe_pairs
from tuner.kernels.serving import same_code
from tuner.kernels.shape import Shape


def main() -> None:
    if "nvidia" not in triton.backends.backends:
        print(json.dumps({"skip": "this Triton has no NVIDIA backend"}))
        return
    too_big = KernelConfig(128, 128, 128, 1, 4, 5)  # 5 stages of 32 KiB: over 99 KiB
    qwen3 = Shape(384, 2048, (128, 128), (("E", 128), ("top_k", 8)))
    shared = {
        "default-sm90": compile_for_target(default_config().as_dict(), 90, M=64, N=576, K=7168),
        "too-big-sm89": compile_for_target(too_big.as_dict(), 89, M=64, N=576, K=7168),
        "moe-sm90": MOE.compile_for_target(
            moe_default(1), 90, shape=qwen3, M=1, out_dtype=torch.bfloat16
        ),
    }
    sys.path.insert(0, str(build_standin(Path(tempfile.mkdtemp()) / "site")))
    theirs = getattr(importlib.import_module(VLLM_DENSE.module), VLLM_DENSE.function)
    pairs = [compile_dense_pair(theirs, default_config(), 90, M=1, N=256, K=512)]
    pairs += compile_moe_pairs(
        VLLM_MOE.module, VLLM_MOE.function, moe_default(1), 90, M=1, E=8, N=256, K=512, top_k=2
    )
    result = {
        "pairs": [[ours.shared, same_code(ours, theirs)] for ours, theirs in pairs],
        "hash": dense.kernel_source_hash(),
        "shared": {name: kernel.metadata.shared for name, kernel in shared.items()},
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
