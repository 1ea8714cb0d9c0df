"""Compiling the fused-MoE kernel for a GPU target without a GPU (tuner.kernels.moe.target):
its specialization of each launch is the one Triton's own launcher binding makes from the
arguments `invoke_moe_gemm` passes (sorted and naive assignment, SWAP_AB, one block of N)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[4]

PARITY = """
import json, torch, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import make_backend
from triton.runtime.jit import create_function_from_signature
from tuner.kernels.moe.kernel import fused_moe_fp8_block_kernel as fn, invoke_moe_gemm, parse_config
from tuner.kernels.moe.specialization import (launch_em, max_padded_slots, uses_naive_assignment,
                                              uses_swap_ab)
from tuner.kernels.moe.target import launch_specialization

class Capture:
    def __init__(self):
        self.calls = []
    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.calls.append((args, kwargs))

rows = []
# (M, E, N, K, top_k, BLOCK_SIZE_M, BLOCK_SIZE_N, arch): tiny-moe (one block of N in both
# GEMMs), Qwen3-30B-A3B with SWAP_AB on sm90 and without on sm89, DeepSeek-V3 at M = 1 (naive).
for M, E, N, K, top_k, bm, bn, arch in ((33, 4, 64, 128, 2, 16, 64, 89),
                                        (256, 128, 768, 2048, 8, 16, 128, 90),
                                        (256, 128, 768, 2048, 8, 64, 128, 89),
                                        (1, 256, 256, 7168, 8, 16, 64, 90)):
    config = dict(BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=128, GROUP_SIZE_M=1,
                  num_warps=4, num_stages=3)
    backend = make_backend(GPUTarget("cuda", arch, 32))
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    meta, fp8, ids, slots = "meta", torch.float8_e4m3fn, torch.int32, M * top_k
    naive = uses_naive_assignment(M, top_k, E)
    if naive:
        routing = (None, torch.empty(slots, dtype=ids, device=meta),
                   torch.empty(1, dtype=ids, device=meta))
    else:
        padded = max_padded_slots(slots, E, bm)
        routing = (torch.empty(padded, dtype=ids, device=meta),
                   torch.empty(-(-padded // bm), dtype=ids, device=meta),
                   torch.empty(1, dtype=ids, device=meta))
    for a_rows, n, k, launch_top_k, weighted in ((M, 2 * N, K, top_k, False),
                                                 (slots, K, N, 1, True)):
        capture = Capture()
        invoke_moe_gemm(torch.empty(a_rows, k, dtype=fp8, device=meta),
                        torch.empty(a_rows, -(-k // 128), device=meta),
                        torch.empty(E, n, k, dtype=fp8, device=meta),
                        torch.empty(E, -(-n // 128), -(-k // 128), device=meta),
                        torch.empty(a_rows * launch_top_k, n, dtype=torch.bfloat16, device=meta),
                        torch.empty(M, top_k, device=meta), *routing,
                        mul_routed_weight=weighted, top_k=launch_top_k, config=config,
                        block_shape=(128, 128), arch=arch, kernel=capture)
        args, kwargs = capture.calls[0]
        bound, spec, options = binder(*args, **kwargs)
        _, sig, const, attrs = fn._pack_args(backend, kwargs, bound, spec, options)
        ours = launch_specialization(
            parse_config(config, (128, 128)), N=n, K=k,
            EM=launch_em(slots, E, bm, a_rows, launch_top_k, naive=naive), slots=slots,
            top_k=launch_top_k, mul_routed_weight=weighted, block_shape=(128, 128),
            out_dtype=torch.bfloat16, naive=naive, swap_ab=uses_swap_ab(bm, bn, arch))
        rows.append({"case": [M, E, N, K, top_k, bm, bn, arch, weighted],
                     "naive": naive, "swap_ab": kwargs["SWAP_AB"], "stride_bsn": kwargs.get(
                         "stride_bsn", args[fn.arg_names.index("stride_bsn")]),
                     "same": ours == (sig, const, attrs),
                     "ours": repr(ours), "triton": repr((sig, const, attrs))})
print(json.dumps(rows))
"""


def test_launch_specialization_is_tritons_binding_of_invoke_moe_gemms_launch(tmp_path) -> None:
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    env.update(PYTHONPATH=str(REPO_ROOT), TRITON_CACHE_DIR=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-c", PARITY],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(done.stdout.strip().splitlines()[-1])
    assert [(row["naive"], row["swap_ab"], row["stride_bsn"]) for row in rows] == [
        (False, False, 0),
        (False, False, 0),  # tiny-moe: one block of N, stride 0 as vLLM's
        (False, True, 16),
        (False, True, 6),
        (False, False, 16),
        (False, False, 6),
        (True, True, 56),
        (True, True, 2),
    ]
    for row in rows:
        assert row["same"], (row["case"], row["ours"], row["triton"])
