"""Our fused-MoE kernel against vLLM's `fused_moe_kernel`: the same compiled code, the same output.

    python bench/moe_fidelity.py --vllm-file PATH   # writes bench/results/moe_fidelity_*.json

PATH is vLLM's vllm/model_executor/layers/fused_moe/fused_moe.py (an installed vLLM's, or a
fetched copy); only its `fused_moe_kernel` and `write_zeros_to_output` are read, with the ast
module, and run with this Triton (vLLM's own imports are never executed). Nothing of vLLM is kept
in this project.

Compiled code (no GPU): for each config, shape, launch (the expert MLP's gate_up and down GEMMs)
and architecture, each kernel is specialized by Triton's own launcher binding from the arguments
its host wrapper passes at run time (ours: `invoke_moe_gemm`, captured; vLLM's: the argument list
of `invoke_fused_moe_kernel` on its fp8_w8a8 block path), compiled with triton.compile for
GPUTarget("cuda", arch, 32), and compared on shared memory (`metadata.shared`), registers and
spills (ptxas's `-v` log) and the PTX instruction mix (instructions counted by full opcode).

Outputs (interpreter): both kernels run under TRITON_INTERPRET=1 on the same small inputs (a
child process) and their outputs are compared element for element (`interpreter_check`).
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

from tuner.measure.fidelity import compile_launch  # the compile tuner doctor uses

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

ARCHS = (90, 89)  # Hopper (H100, H200) and Ada (L40S)
# (label, E, N = per-rank intermediate size, K = hidden size, top_k, M tokens): shapes/*.toml
SHAPES = (
    ("qwen3-30b-a3b tp1", 128, 768, 2048, 8, 256),
    ("deepseek-v3 tp8", 256, 256, 7168, 8, 1),
    ("tiny-moe", 4, 64, 128, 2, 33),
)
CONFIGS = 20  # vLLM's per-M defaults first, then a seeded sample of vLLM's space
SEED = 0
BLOCK_SHAPE = (128, 128)
OUT_DIR = REPO / "bench" / "results"
VLLM_FUNCTIONS = ("write_zeros_to_output", "fused_moe_kernel")


def load_vllm_kernel(path: Path):
    """vLLM's `fused_moe_kernel` (a Triton JITFunction) from its fused_moe.py.

    The two functions are cut out of the file with ast and written with `import triton` and
    `import triton.language as tl` above them to a temporary module (Triton reads a kernel's
    source from its file), which is imported.

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file lacks one of the two functions.
    """
    text = Path(path).read_text()
    lines = text.splitlines(keepends=True)
    found = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef) and node.name in VLLM_FUNCTIONS:
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            found[node.name] = "".join(lines[start - 1:node.end_lineno])
    missing = [name for name in VLLM_FUNCTIONS if name not in found]
    if missing:
        raise ValueError(f"{path} has no {', '.join(missing)}")
    folder = Path(tempfile.mkdtemp(prefix="vllm_fused_moe_"))
    module_path = folder / "vllm_fused_moe_kernel.py"
    module_path.write_text("import triton\nimport triton.language as tl\n\n\n"
                           + "\n\n".join(found[name] for name in VLLM_FUNCTIONS))
    spec = importlib.util.spec_from_file_location("vllm_fused_moe_kernel", module_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.fused_moe_kernel


def launches(E: int, N: int, K: int, top_k: int, M: int, device: str = "meta"):
    """The two launches of the expert MLP at M tokens, as dicts of the tensors both host wrappers
    take (vLLM's layouts: C [rows, top_k, N'], topk_weights [M, top_k]); `meta` tensors (no
    memory) unless device says otherwise. The routing tensors are made by the caller."""
    import torch

    fp8 = torch.float8_e4m3fn
    gn, gk = BLOCK_SHAPE
    out = []
    for name, rows, n, k, launch_top_k, weighted in (("gate_up", M, 2 * N, K, top_k, False),
                                                      ("down", M * top_k, K, N, 1, True)):
        out.append({
            "name": name, "top_k": launch_top_k, "mul_routed_weight": weighted,
            "A": torch.empty(rows, k, dtype=fp8, device=device),
            "A_scale": torch.empty(rows, -(-k // gk), device=device),
            "B": torch.empty(E, n, k, dtype=fp8, device=device),
            "B_scale": torch.empty(E, -(-n // gn), -(-k // gk), device=device),
            "C": torch.empty(rows, launch_top_k, n, dtype=torch.bfloat16, device=device),
            "topk_weights": torch.empty(M, top_k, device=device),
        })
    return out


def ours_call(launch: dict, routing: tuple, config: dict) -> tuple[tuple, dict]:
    """(args, kwargs) our host wrapper `invoke_moe_gemm` passes to the kernel, captured."""
    import tuner.kernels.moe.kernel as ours

    captured = {}
    capture = type("Capture", (), {"__getitem__": lambda self, grid: lambda *args, **kwargs:
                                   captured.update(call=(args, kwargs))})
    real = ours.fused_moe_fp8_block_kernel
    ours.fused_moe_fp8_block_kernel = capture()
    try:
        ours.invoke_moe_gemm(launch["A"], launch["A_scale"], launch["B"], launch["B_scale"],
                             launch["C"], launch["topk_weights"], *routing,
                             mul_routed_weight=launch["mul_routed_weight"],
                             top_k=launch["top_k"], config=config, block_shape=BLOCK_SHAPE)
    finally:
        ours.fused_moe_fp8_block_kernel = real
    return captured["call"]


def vllm_call(launch: dict, routing: tuple, config: dict) -> tuple[tuple, dict]:
    """(args, kwargs) vLLM's `invoke_fused_moe_kernel` passes to `fused_moe_kernel` on its
    fp8_w8a8 block path without bias: EM cut for small batches, SPLIT_K forced to 1,
    BLOCK_SIZE_K = min(BLOCK_SIZE_K, min(block_shape)), 0 for the bias strides,
    compute_type = tl.bfloat16 (source: vLLM fused_moe.py, invoke_fused_moe_kernel)."""
    import triton.language as tl

    A, B, C, As, Bs = (launch[key] for key in ("A", "B", "C", "A_scale", "B_scale"))
    sorted_ids, expert_ids, padded = routing
    top_k = launch["top_k"]
    EM = sorted_ids.size(0)
    if A.size(0) < config["BLOCK_SIZE_M"]:
        EM = min(EM, A.size(0) * top_k * config["BLOCK_SIZE_M"])
    meta = dict(config, SPLIT_K=1)
    meta["BLOCK_SIZE_K"] = min(meta["BLOCK_SIZE_K"], min(BLOCK_SHAPE))
    args = (A, B, C, None, As, Bs, launch["topk_weights"], sorted_ids, expert_ids, padded,
            B.size(1), B.size(2), EM, A.size(0) * top_k, A.stride(0), A.stride(1), B.stride(0),
            B.stride(2), B.stride(1), C.stride(1), C.stride(2), As.stride(0), As.stride(1),
            Bs.stride(0), Bs.stride(2), Bs.stride(1), 0, 0, BLOCK_SHAPE[0], BLOCK_SHAPE[1])
    kwargs = dict(MUL_ROUTED_WEIGHT=launch["mul_routed_weight"], top_k=top_k,
                  compute_type=tl.bfloat16, use_fp8_w8a8=True, use_int8_w8a8=False,
                  use_int8_w8a16=False, per_channel_quant=False, HAS_BIAS=False, **meta)
    return args, kwargs


def compile_call(fn, arch: int, call: tuple[tuple, dict]) -> dict:
    """Specialize `fn` for (args, kwargs) with Triton's launcher binding, compile for the arch,
    and return shared bytes, registers, spills and the PTX opcode counts
    (`tuner.measure.fidelity.compile_launch`, the compile tuner doctor uses)."""
    args, kwargs = call
    compiled = compile_launch(fn, arch, args, kwargs)
    return {"shared": compiled.shared, "n_regs": compiled.n_regs,
            "spill_bytes": compiled.spill_bytes, "opcodes": compiled.opcodes}


def pick_configs(count: int) -> list[dict]:
    """vLLM's per-M defaults (distinct), then a seeded sample of vLLM's space, `count` in all."""
    from tuner.kernels.moe.space import default_config, vllm_space

    picked = []
    for M in (1, 16, 64, 256):
        config = default_config(M, BLOCK_SHAPE).as_dict()
        if config not in picked:
            picked.append(config)
    space = [c.as_dict() for c in vllm_space(BLOCK_SHAPE)]
    rest = [c for c in space if c not in picked]
    return (picked + random.Random(SEED).sample(rest, count))[:count]


def compare_row(ours: dict, theirs: dict) -> dict:
    """One table row: each kernel's figures and whether they agree."""
    keys = set(ours["opcodes"]) | set(theirs["opcodes"])
    delta = {k: ours["opcodes"][k] - theirs["opcodes"][k] for k in sorted(keys)
             if ours["opcodes"][k] != theirs["opcodes"][k]}
    return {
        "shared": [ours["shared"], theirs["shared"]],
        "n_regs": [ours["n_regs"], theirs["n_regs"]],
        "spill_bytes": [ours["spill_bytes"], theirs["spill_bytes"]],
        "instructions": [sum(ours["opcodes"].values()), sum(theirs["opcodes"].values())],
        "opcode_delta": delta,  # ours minus vLLM's, opcodes that differ
        "same_shared": ours["shared"] == theirs["shared"],
        "same_regs": ours["n_regs"] == theirs["n_regs"],
        "same_mix": not delta,
    }


def compiled_rows(vllm_file: Path, archs, configs: list[dict], shapes) -> list[dict]:
    """Every (arch, shape, launch, config) compiled with both kernels and compared."""
    import torch

    from tuner.kernels.moe.kernel import fused_moe_fp8_block_kernel
    from tuner.kernels.moe.specialization import max_padded_slots

    theirs_fn = load_vllm_kernel(vllm_file)
    rows = []
    for label, E, N, K, top_k, M in shapes:
        for launch in launches(E, N, K, top_k, M):
            for config in configs:
                bm = config["BLOCK_SIZE_M"]
                padded_len = max_padded_slots(M * top_k, E, bm)
                routing = (torch.empty(padded_len, dtype=torch.int32),
                           torch.empty(-(-padded_len // bm), dtype=torch.int32),
                           torch.empty(1, dtype=torch.int32))
                calls = (ours_call(launch, routing, config), vllm_call(launch, routing, config))
                for arch in archs:
                    row = {"arch": arch, "shape": label, "M": M, "launch": launch["name"],
                           "config": config}
                    try:
                        row.update(compare_row(compile_call(fused_moe_fp8_block_kernel, arch,
                                                            calls[0]),
                                               compile_call(theirs_fn, arch, calls[1])))
                    except Exception as exc:  # noqa: BLE001 - a config either kernel rejects
                        row["error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:300]
                    rows.append(row)
                    print(arch, label, launch["name"], row.get("same_mix"), file=sys.stderr)
    return rows


INTERP_CASES = (  # (M, E, N, K, top_k, config, expert -1 in block 0)
    (5, 4, 64, 128, 2, dict(BLOCK_SIZE_M=16, BLOCK_SIZE_N=32, BLOCK_SIZE_K=64, GROUP_SIZE_M=1,
                            num_warps=4, num_stages=2), False),
    (33, 8, 96, 256, 3, dict(BLOCK_SIZE_M=32, BLOCK_SIZE_N=64, BLOCK_SIZE_K=128,
                             GROUP_SIZE_M=2, num_warps=4, num_stages=3), False),
    (20, 4, 64, 128, 1, dict(BLOCK_SIZE_M=16, BLOCK_SIZE_N=128, BLOCK_SIZE_K=128,
                             GROUP_SIZE_M=1, num_warps=4, num_stages=3), True),
)


def interpreter_check(theirs_fn) -> dict:
    """Both kernels on the same inputs under TRITON_INTERPRET=1 (set before Triton is
    imported): both GEMMs of INTERP_CASES, inputs from `make_moe_inputs` (seed M), the down
    GEMM on a seeded standard-normal activation quantized per 1 x 128 group; C starts filled
    with 7 in both, so rows neither writes compare too. The third case marks block 0 as
    another rank's expert (-1), which both must write as zeros.

    Returns:
        {"cases": launches run, "same": launches whose C is bitwise equal, "rows": [{"M",
        "launch", "numel", "written": elements ours changed, "differing": elements unequal}]}.
    """
    import torch

    from tuner.kernels.moe.align import moe_align_block_size
    from tuner.kernels.moe.kernel import invoke_moe_gemm
    from tuner.kernels.moe.reference import make_moe_inputs, quantize_groups

    rows = []
    for M, E, N, K, top_k, config, foreign in INTERP_CASES:
        inputs = make_moe_inputs(M, E, N, K, top_k, BLOCK_SHAPE, seed=M, device="cpu")
        sorted_ids, expert_ids, padded = moe_align_block_size(
            inputs.topk_ids, config["BLOCK_SIZE_M"], E)
        if foreign:
            expert_ids = expert_ids.clone()
            expert_ids[0] = -1
        routing = (sorted_ids, expert_ids, padded)
        torch.manual_seed(M)
        act_q, act_scale = quantize_groups(torch.randn(M * top_k, N), BLOCK_SHAPE[1])
        for launch in launches(E, N, K, top_k, M, device="cpu"):
            if launch["name"] == "gate_up":
                launch.update(A=inputs.x, A_scale=inputs.x_scale, B=inputs.w1,
                              B_scale=inputs.w1_scale)
            else:
                launch.update(A=act_q, A_scale=act_scale, B=inputs.w2, B_scale=inputs.w2_scale)
            launch["topk_weights"] = inputs.topk_weights
            outs = []
            for which in ("ours", "vllm"):
                C = torch.full(tuple(launch["C"].shape), 7.0, dtype=torch.bfloat16)
                launch["C"] = C
                if which == "ours":
                    invoke_moe_gemm(launch["A"], launch["A_scale"], launch["B"],
                                    launch["B_scale"], C, launch["topk_weights"], *routing,
                                    mul_routed_weight=launch["mul_routed_weight"],
                                    top_k=launch["top_k"], config=config,
                                    block_shape=BLOCK_SHAPE)
                else:
                    args, kwargs = vllm_call(launch, routing, config)
                    grid = (-(-args[12] // config["BLOCK_SIZE_M"])
                            * -(-launch["B"].size(1) // config["BLOCK_SIZE_N"]),)
                    theirs_fn[grid](*args, **kwargs)
                outs.append(C)
            rows.append({"M": M, "launch": launch["name"], "numel": outs[0].numel(),
                         "written": int((outs[0] != 7).sum()),
                         "differing": int((outs[0] != outs[1]).sum())})
    return {"cases": len(rows), "same": sum(r["differing"] == 0 for r in rows), "rows": rows}


def summary(rows: list[dict]) -> list[dict]:
    """Per (arch, shape, launch): configs compiled, how many agree on each figure."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["arch"], row["shape"], row["launch"]), []).append(row)
    out = []
    for (arch, shape, launch), group in groups.items():
        done = [r for r in group if "error" not in r]
        out.append({
            "arch": arch, "shape": shape, "launch": launch, "configs": len(group),
            "errors": len(group) - len(done),
            "same_shared": sum(r["same_shared"] for r in done),
            "same_regs": sum(r["same_regs"] for r in done),
            "same_mix": sum(r["same_mix"] for r in done),
            "max_instruction_delta": max((abs(r["instructions"][0] - r["instructions"][1])
                                          for r in done), default=None),
        })
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm-file", type=Path, required=True,
                        help="vLLM's vllm/model_executor/layers/fused_moe/fused_moe.py")
    parser.add_argument("--vllm-source", default="",
                        help="what the file is (version or commit), recorded in the result")
    parser.add_argument("--arch", type=int, action="append", help="repeat; default 90 and 89")
    parser.add_argument("--configs", type=int, default=CONFIGS)
    parser.add_argument("--shapes", type=int, default=len(SHAPES), help="the first SHAPES")
    parser.add_argument("--out-dir", type=Path, default=OUT_DIR)
    parser.add_argument("--interpret-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not args.vllm_file.is_file():
        parser.exit(2, f"no such file: {args.vllm_file}\n")
    if args.interpret_only:  # the child process, under TRITON_INTERPRET=1
        print(json.dumps(interpreter_check(load_vllm_kernel(args.vllm_file))))
        return
    # Registers come from ptxas's log; a fresh cache makes every compile run ptxas.
    os.environ.update(TRITON_DUMP_PTXAS_LOG="1", TRITON_ALWAYS_COMPILE="1")
    os.environ.pop("TRITON_INTERPRET", None)
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="moe_fidelity_cache_")
    child = subprocess.run(
        [sys.executable, __file__, "--vllm-file", str(args.vllm_file), "--interpret-only"],
        env=dict(os.environ, TRITON_INTERPRET="1"), capture_output=True, text=True, check=True)
    interp = json.loads(child.stdout.strip().splitlines()[-1])
    configs, archs = pick_configs(args.configs), args.arch or ARCHS
    rows = compiled_rows(args.vllm_file, archs, configs, SHAPES[:args.shapes])
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    report = {
        "benchmark": "moe_fidelity", "date": stamp, "host": platform.node(),
        "versions": {name: metadata.version(name) for name in ("triton", "torch")},
        "vllm_file": str(args.vllm_file), "vllm_source": args.vllm_source,
        "block_shape": list(BLOCK_SHAPE), "configs": configs, "interpreter": interp,
        "summary": summary(rows), "rows": rows,
    }
    args.out_dir.mkdir(parents=True, exist_ok=True)
    path = args.out_dir / f"moe_fidelity_{'_'.join(f'sm{a}' for a in archs)}_{stamp}.json"
    path.write_text(json.dumps(report, indent=1) + "\n")
    print("| arch | shape (M) | launch | configs | same shared | same regs | same PTX mix |")
    print("|---|---|---|---|---|---|---|")
    for s in report["summary"]:
        print(f"| sm{s['arch']} | {s['shape']} | {s['launch']} | {s['configs']} | "
              f"{s['same_shared']} | {s['same_regs']} | {s['same_mix']} |")
    print(f"interpreter: {interp['same']} of {interp['cases']} launches bitwise equal")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
