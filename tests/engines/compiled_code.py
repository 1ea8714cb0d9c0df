"""vLLM 0.33.0's block-FP8 kernels, launched by vLLM's own host code, against the builtin ones,
compiled for GPU targets with this Triton (no GPU needed). The lane's tests run under
TRITON_INTERPRET=1, where `triton.jit` makes interpreted functions that cannot be compiled, so
this runs in a child process without it:

    python -m tests.engines.compiled_code dense|moe VLLM_ROOT ARCH... > one JSON line

VLLM_ROOT holds the wheel's files at their paths (vllm/model_executor/...). Each row is one
launch compiled with both kernels: shared memory, registers, spills and the PTX opcode counts
(`tuner.kernels.target`), with "same" true when all agree.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[2]
FP8_UTILS = "vllm/model_executor/layers/quantization/utils/fp8_utils.py"
FUSED_MOE = "vllm/model_executor/layers/fused_moe/fused_moe.py"
# The three specializations of M (1, a multiple of 16, another), one per arch: M's
# specialization is the host's, the same on every arch, so each pair is compiled once.
DENSE_M = (1, 64, 100)
DENSE_N, DENSE_K = 4096, 4096
# BLOCK_SIZE_M of vLLM's axis on both sides of SWAP_AB's bound (< 64 swaps on sm90); 128, 256
# and 32 add compile time, not another path.
MOE_BLOCK_SIZE_M = (16, 64)


def bench(name: str):
    """One of bench/'s scripts as a module."""
    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def vllm_dense_call(root: Path, config: dict, M: int) -> tuple[tuple, dict]:
    """(args, kwargs) vLLM's own `w8a8_triton_block_scaled_mm` passes to its kernel for A [M, K]
    and a weight [N, K] on "meta" tensors, with `config` as the file's only entry."""
    import torch
    import triton

    stand_ins = bench("vllm_moe_host")
    capture = stand_ins.Capture()
    path = root / FP8_UTILS
    envs = SimpleNamespace(VLLM_BATCH_INVARIANT=False)
    given = {
        "torch": torch,
        "triton": triton,
        "envs": envs,
        "current_platform": stand_ins.Platform(90),
        "_w8a8_triton_block_scaled_mm": capture,
        "get_w8a8_block_fp8_configs": lambda *shape: {1: dict(config)},
    }
    host = bench("engine_source").load(
        path.read_text(),
        ("w8a8_triton_block_scaled_mm",),
        given,
        filename=str(path),
        module="vllm_fp8_utils",
    )
    fp8, meta, N, K = torch.float8_e4m3fn, {"device": "meta"}, DENSE_N, DENSE_K
    host.w8a8_triton_block_scaled_mm(
        torch.empty(M, K, dtype=fp8, **meta),
        torch.empty(N, K, dtype=fp8, **meta),
        torch.empty(M, K // 128, **meta),
        torch.empty(N // 128, K // 128, **meta),
        [128, 128],
        torch.bfloat16,
    )
    return capture.calls[0]


def dense(root: Path, archs: list[int]) -> list[dict]:
    """vLLM's default config at one of DENSE_M per arch (in turn): the builtin compiled as its
    compile-for-target specializes it, vLLM's as its host code launches it."""
    from tuner.kernels.dense.kernel import w8a8_block_fp8_matmul_kernel
    from tuner.kernels.dense.space import DEFAULT_BLOCK_SHAPE
    from tuner.kernels.dense.workload import captured_launch
    from tuner.kernels.shape import Shape

    ve = bench("vllm_equivalence")
    compiled = bench("compiled")
    theirs = ve.load_dense_kernel(root / FP8_UTILS)
    rows = []
    for arch, M in zip(archs, DENSE_M, strict=True):
        for config in ve.pick_configs(1):
            # the builtin only (compile_dense_pair would compile vLLM's kernel once more)
            launch = captured_launch(config, M, Shape(DENSE_N, DENSE_K, DEFAULT_BLOCK_SHAPE))
            ours = compiled.compile_launch(w8a8_block_fp8_matmul_kernel, arch, *launch)
            vllm = compiled.compile_launch(
                theirs, arch, *vllm_dense_call(root, config.as_dict(), M)
            )
            rows.append(
                {
                    "arch": arch,
                    "M": M,
                    "config": config.as_dict(),
                    "regs": [ours.n_regs, vllm.n_regs],
                    "shared": [ours.shared, vllm.shared],
                    "differ": compiled.same_code(ours, vllm),
                }
            )
    return rows


def moe_configs() -> list[dict]:
    """vLLM's default at M = 1 and one config of each of MOE_BLOCK_SIZE_M with BLOCK_SIZE_N
    >= 64 (bench/moe_fidelity.py's sample: BLOCK_SIZE_M < 64 swaps A and B on sm90)."""
    mf = bench("moe_fidelity")
    picked: dict[int, dict] = {}
    for config in mf.pick_configs(10):
        picked.setdefault(config["BLOCK_SIZE_M"], config)
    return [picked[block_m] for block_m in MOE_BLOCK_SIZE_M]


def moe(root: Path, archs: list[int]) -> list[dict]:
    """Both GEMMs of the expert MLP, each kernel launched by its own host code for the arch:
    moe_configs() on tiny-moe (M = 33, sorted assignment), and the first of them on DeepSeek-V3
    at M = 1 (vLLM's naive assignment)."""
    mf = bench("moe_fidelity")
    path = root / FUSED_MOE
    tiny, naive = (
        next(s for s in mf.SHAPES if s[0].startswith(name)) for name in ("tiny-moe", "deepseek-v3")
    )
    configs = moe_configs()
    rows = mf.compiled_rows(path, archs, configs, [tiny]) + mf.compiled_rows(
        path, archs, configs[:1], [naive]
    )
    return [
        row
        | {
            "same": "error" not in row
            and row["same_mix"]
            and row["same_regs"]
            and row["same_shared"]
            and len(set(row["spill_bytes"])) == 1
        }
        for row in rows
    ]


def main() -> None:
    kind, root, *archs = sys.argv[1:]
    rows = {"dense": dense, "moe": moe}[kind](Path(root), [int(arch) for arch in archs])
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
