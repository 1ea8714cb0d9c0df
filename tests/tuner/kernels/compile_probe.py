"""Run in a process without TRITON_INTERPRET (test_target.py): compile the dense and fused-MoE
kernels for GPU targets without a GPU, compare our launch specialization with the one Triton's
own launcher binding makes from the host code's arguments, and compile doctor's MoE pair (our
kernel and a stand-in vLLM's copy of it). Prints one JSON object."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import torch
import triton
from triton import knobs
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, make_backend
from triton.runtime.cache import get_cache_key
from triton.runtime.jit import create_function_from_signature

from tests.standin_vllm import build_standin
from tuner.kernels.config import KernelConfig
from tuner.kernels.dense import kernel as dense
from tuner.kernels.dense.space import default_config
from tuner.kernels.dense.workload import compile_for_target, launch_specialization
from tuner.kernels.moe import workload as moe_target
from tuner.kernels.moe.family import MOE
from tuner.kernels.moe.kernel import fused_moe_fp8_block_kernel, invoke_moe_gemm, parse_config
from tuner.kernels.moe.space import default_config as moe_default
from tuner.kernels.moe.space import launch_em, max_padded_slots, uses_naive_assignment, uses_swap_ab
from tuner.kernels.moe.workload import compile_moe_pairs
from tuner.kernels.serving import same_code
from tuner.kernels.shape import Shape
from tuner.kernels.target import Capture


def _binder(fn, arch: int):
    backend = make_backend(GPUTarget("cuda", arch, 32))
    return backend, create_function_from_signature(fn.signature, fn.params, backend)


def _same_cache_key(fn, backend, ours, theirs, meta: dict) -> bool:
    """Whether our specialization compiles under the cache key of Triton's launch: the launch's
    options are num_warps, num_stages and what JITFunction.run adds (debug, and the
    compilation knobs this Triton has)."""
    launch = dict(meta, num_warps=4, num_stages=2, debug=knobs.runtime.debug)
    for knob in ("instrumentation_mode", "fpsan_homomorphic_casts"):
        if hasattr(knobs.compilation, knob):
            launch[knob] = getattr(knobs.compilation, knob)
    keys = [
        get_cache_key(ASTSource(fn, *spec), backend, backend.parse_options(opts), env_vars={})
        for spec, opts in ((ours, {"num_warps": 4, "num_stages": 2}), (theirs, launch))
    ]
    return keys[0] == keys[1]


def dense_parity() -> list[list]:
    """[ours == Triton's specialization, same compile cache key, ours, Triton's] per launch."""
    fn = dense.w8a8_block_fp8_matmul_kernel
    backend, binder = _binder(fn, 90)
    meta = dict(BLOCK_SIZE_M=64, BLOCK_SIZE_N=128, BLOCK_SIZE_K=128, GROUP_SIZE_M=32)
    rows = []
    for M, N, K, dtype in (
        (1, 576, 7168, torch.bfloat16),
        (64, 2112, 7168, torch.float16),
        (33, 100, 17, torch.bfloat16),
        (4096, 7168, 18432, torch.bfloat16),
    ):
        kt, nt = -(-K // 128), -(-N // 128)
        A, B = (torch.empty(rows, K, dtype=torch.float8_e4m3fn) for rows in (M, N))
        C, As, Bs = torch.empty(M, N, dtype=dtype), torch.empty(M, kt), torch.empty(nt, kt)
        strides = (*A.stride(), *B.stride()[::-1], *C.stride(), *As.stride(), *Bs.stride()[::-1])
        bound, spec, options = binder(A, B, C, As, Bs, M, N, K, 128, 128, *strides, **meta)
        theirs = fn._pack_args(backend, meta, bound, spec, options)[1:]
        ours = launch_specialization(default_config(), M, N, K, 128, 128, dtype)
        same_key = _same_cache_key(fn, backend, ours, theirs, meta)
        rows.append([ours == tuple(theirs), same_key, repr(ours), repr(theirs)])
    return rows


def _moe_launches(M: int, E: int, N: int, K: int, top_k: int, config: dict, arch: int):
    """(our Launch, naive, the (args, kwargs) `invoke_moe_gemm` passes its kernel) for both
    GEMMs of the expert MLP on "meta" tensors."""
    meta, fp8, ids, slots = "meta", torch.float8_e4m3fn, torch.int32, M * top_k
    bm = config["BLOCK_SIZE_M"]
    naive = uses_naive_assignment(M, top_k, E)
    padded = slots if naive else max_padded_slots(slots, E, bm)
    routing = (
        None if naive else torch.empty(padded, dtype=ids, device=meta),
        torch.empty(slots if naive else -(-padded // bm), dtype=ids, device=meta),
        torch.empty(1, dtype=ids, device=meta),
    )
    for a_rows, n, k, launch_top_k, weighted in (
        (M, 2 * N, K, top_k, False),
        (slots, K, N, 1, True),
    ):
        capture = Capture()
        invoke_moe_gemm(
            torch.empty(a_rows, k, dtype=fp8, device=meta),
            torch.empty(a_rows, -(-k // 128), device=meta),
            torch.empty(E, n, k, dtype=fp8, device=meta),
            torch.empty(E, -(-n // 128), -(-k // 128), device=meta),
            torch.empty(a_rows * launch_top_k, n, dtype=torch.bfloat16, device=meta),
            torch.empty(M, top_k, device=meta),
            *routing,
            mul_routed_weight=weighted,
            top_k=launch_top_k,
            config=config,
            block_shape=(128, 128),
            arch=arch,
            kernel=capture,
        )
        em = launch_em(slots, E, bm, a_rows, launch_top_k, naive=naive)
        yield moe_target.Launch(n, k, em, slots, launch_top_k, weighted), naive, capture.calls[0]


def moe_parity() -> list[dict]:
    """Per launch of `invoke_moe_gemm`: naive, SWAP_AB, stride_bsn, and ours == Triton's."""
    fn = fused_moe_fp8_block_kernel
    rows = []
    # (M, E, N, K, top_k, BLOCK_SIZE_M, BLOCK_SIZE_N, arch): tiny-moe (one block of N in both
    # GEMMs), Qwen3-30B-A3B with SWAP_AB on sm90 and without on sm89, DeepSeek-V3 at M = 1.
    for M, E, N, K, top_k, bm, bn, arch in (
        (33, 4, 64, 128, 2, 16, 64, 89),
        (256, 128, 768, 2048, 8, 16, 128, 90),
        (256, 128, 768, 2048, 8, 64, 128, 89),
        (1, 256, 256, 7168, 8, 16, 64, 90),
    ):
        config = dict(BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=128, GROUP_SIZE_M=1)
        config |= dict(num_warps=4, num_stages=3)
        backend, binder = _binder(fn, arch)
        for launch, naive, (args, kwargs) in _moe_launches(M, E, N, K, top_k, config, arch):
            bound, spec, options = binder(*args, **kwargs)
            theirs = fn._pack_args(backend, kwargs, bound, spec, options)[1:]
            ours = moe_target.launch_specialization(
                parse_config(config, (128, 128)),
                launch,
                block_shape=(128, 128),
                out_dtype=torch.bfloat16,
                naive=naive,
                swap_ab=uses_swap_ab(bm, bn, arch),
            )
            stride_bsn = kwargs.get("stride_bsn", args[fn.arg_names.index("stride_bsn")])
            same = ours == tuple(theirs)
            rows.append({"naive": naive, "swap_ab": kwargs["SWAP_AB"], "stride_bsn": stride_bsn})
            rows[-1] |= {"same": same, "ours": repr(ours), "triton": repr(theirs)}
    return rows


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
    pairs = compile_moe_pairs(
        "vllm.model_executor.layers.fused_moe.fused_moe",
        "fused_moe_kernel",
        moe_default(1),
        90,
        M=1,
        E=8,
        N=256,
        K=512,
        top_k=2,
    )
    result = {
        "moe_pairs": [[ours.shared, same_code(ours, theirs)] for ours, theirs in pairs],
        "hash": dense.kernel_source_hash(),
        "shared": {name: kernel.metadata.shared for name, kernel in shared.items()},
        "dense": dense_parity(),
        "moe": moe_parity(),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
