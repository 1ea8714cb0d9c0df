"""Our fused-MoE kernel and launch against vLLM's: the same compiled code, the same output.

    python bench/moe_fidelity.py --vllm-file PATH   # writes bench/results/moe_fidelity_*.json

PATH is vLLM's vllm/model_executor/layers/fused_moe/fused_moe.py (an installed vLLM's, or one
from an unzipped wheel), with its utils.py beside it. vLLM's own code runs, cut out of those
files with ast (bench/engine_source.py), its imports never executed: the kernel
(`fused_moe_kernel`, `write_zeros_to_output`), the host function that launches it on the
fp8_w8a8 block path (`invoke_fused_moe_triton_kernel`, which sets EM, SPLIT_K, the BLOCK_SIZE_K
cap, SWAP_AB through utils.py's `enable_swap_ab` and naive_block_assignment) and the routing
choice (`_prepare_expert_assignment`: naive assignment for small batches). The names they import
are given here: a platform that "is" the architecture compared, `moe_align_block_size` as
sized tensors (ours). Written for vLLM 0.33.0's file; nothing of vLLM is kept in this project.

Compiled code (no GPU): for each architecture, shape, launch (the expert MLP's gate_up and down
GEMMs) and config, each kernel is specialized by Triton's own launcher binding from the arguments
its host code passes (ours: `invoke_moe_gemm`; vLLM's: its own), compiled with triton.compile
for GPUTarget("cuda", arch, 32), and compared on shared memory (`metadata.shared`), registers and
spills (ptxas's `-v` log) and the PTX instruction mix (instructions counted by full opcode).

Outputs (interpreter): both kernels, each launched by its own host code, run under
TRITON_INTERPRET=1 on the same small inputs (a child process), with SWAP_AB both ways, and their
outputs are compared element for element (`interpreter_check`).
"""

from __future__ import annotations

import argparse
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

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "bench")]

from compiled import compile_launch  # noqa: E402 - bench/compiled.py
from vllm_moe_host import (  # noqa: E402 - vLLM's own code, cut out of its files
    BLOCK_SHAPE,
    Capture,
    load_vllm,
    vllm_call,
    vllm_launch,
    vllm_routing,
)

ARCHS = (90, 89, 100)  # Hopper (H100, H200), Ada (L20, L40S), Blackwell (B200)
# (label, E, N = per-rank intermediate size, K = hidden size, top_k, M tokens): shapes/*.toml.
# DeepSeek-V3 at M = 1 is vLLM's naive assignment (1 x 8 x 4 <= 256 experts).
SHAPES = (
    ("qwen3-30b-a3b tp1", 128, 768, 2048, 8, 256),
    ("deepseek-v3 tp8", 256, 256, 7168, 8, 1),
    ("tiny-moe", 4, 64, 128, 2, 33),
)
CONFIGS = 20  # vLLM's per-M defaults, one config of each BLOCK_SIZE_M, then a seeded sample
SEED = 0
OUT_DIR = REPO / "bench" / "results"


def launches(E: int, N: int, K: int, top_k: int, M: int, device: str = "meta"):
    """The two launches of the expert MLP at M tokens, as dicts of the tensors both host
    functions take (vLLM's layouts: C [rows, top_k, N'], topk_weights [M, top_k]); `meta`
    tensors (no memory) unless device says otherwise."""
    import torch

    fp8 = torch.float8_e4m3fn
    gn, gk = BLOCK_SHAPE
    out = []
    for name, rows, n, k, launch_top_k, weighted in (
        ("gate_up", M, 2 * N, K, top_k, False),
        ("down", M * top_k, K, N, 1, True),
    ):
        out.append(
            {
                "name": name,
                "top_k": launch_top_k,
                "mul_routed_weight": weighted,
                "A": torch.empty(rows, k, dtype=fp8, device=device),
                "A_scale": torch.empty(rows, -(-k // gk), device=device),
                "B": torch.empty(E, n, k, dtype=fp8, device=device),
                "B_scale": torch.empty(E, -(-n // gn), -(-k // gk), device=device),
                "C": torch.empty(rows, launch_top_k, n, dtype=torch.bfloat16, device=device),
                "topk_weights": torch.empty(M, top_k, device=device),
            }
        )
    return out


def ours_call(launch: dict, routing: tuple, config: dict, arch: int | None) -> tuple[tuple, dict]:
    """(args, kwargs) our host function `invoke_moe_gemm` passes to the kernel for a GPU of
    `arch`, captured."""
    from tuner.kernels.moe.kernel import invoke_moe_gemm

    capture = Capture()
    invoke_moe_gemm(
        launch["A"],
        launch["A_scale"],
        launch["B"],
        launch["B_scale"],
        launch["C"],
        launch["topk_weights"],
        *routing,
        mul_routed_weight=launch["mul_routed_weight"],
        top_k=launch["top_k"],
        config=config,
        block_shape=BLOCK_SHAPE,
        arch=arch,
        kernel=capture,
    )
    return capture.calls[0]


def compile_call(fn, arch: int, call: tuple[tuple, dict]) -> dict:
    """Specialize `fn` for (args, kwargs) with Triton's launcher binding, compile for the arch,
    and return shared bytes, registers, spills and the PTX opcode counts
    (`compile_launch`, bench/compiled.py)."""
    args, kwargs = call
    compiled = compile_launch(fn, arch, args, kwargs)
    return {
        "shared": compiled.shared,
        "n_regs": compiled.n_regs,
        "spill_bytes": compiled.spill_bytes,
        "opcodes": compiled.opcodes,
    }


def pick_configs(count: int) -> list[dict]:
    """vLLM's per-M defaults (distinct), one seeded config of each BLOCK_SIZE_M of vLLM's space
    (16 to 256) with BLOCK_SIZE_N >= 64 (so BLOCK_SIZE_M < 64 gets SWAP_AB on sm90), then a
    seeded sample of the space: `count` in all, in that order."""
    from tuner.kernels.moe.space import VLLM_AXES, default_config, vllm_space

    picked: list[dict] = []
    for M in (1, 8, 16, 64, 256):
        config = default_config(M, BLOCK_SHAPE).as_dict()
        if config not in picked:
            picked.append(config)
    space = [c.as_dict() for c in vllm_space()]
    draw = random.Random(SEED)
    for block_m in VLLM_AXES["BLOCK_SIZE_M"]:
        fitting = [
            c
            for c in space
            if c["BLOCK_SIZE_M"] == block_m and c["BLOCK_SIZE_N"] >= 64 and c not in picked
        ]
        picked.append(draw.choice(fitting))
    rest = [c for c in space if c not in picked]
    return (picked + draw.sample(rest, count))[:count]


def compare_row(ours: dict, theirs: dict) -> dict:
    """One table row: each kernel's figures and whether they agree."""
    keys = set(ours["opcodes"]) | set(theirs["opcodes"])
    delta = {
        k: ours["opcodes"][k] - theirs["opcodes"][k]
        for k in sorted(keys)
        if ours["opcodes"][k] != theirs["opcodes"][k]
    }
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
    """Every (arch, shape, launch, config) compiled with both kernels, each launched by its own
    host code for that arch, and compared."""
    import torch

    from tuner.kernels.moe.kernel import fused_moe_fp8_block_kernel

    vllm = load_vllm(vllm_file)
    rows = []
    for arch in archs:
        vllm.platform.arch = arch
        for label, E, N, K, top_k, M in shapes:
            topk_ids = torch.empty(M, top_k, dtype=torch.int32, device="meta")
            for config in configs:
                routing = vllm_routing(vllm, topk_ids, config, E)
                for launch in launches(E, N, K, top_k, M):
                    row = {
                        "arch": arch,
                        "shape": label,
                        "M": M,
                        "launch": launch["name"],
                        "config": config,
                    }
                    try:
                        theirs_call = vllm_call(vllm, launch, routing, config)
                        row.update(
                            naive=theirs_call[1]["naive_block_assignment"],
                            swap_ab=theirs_call[1]["SWAP_AB"],
                        )
                        row.update(
                            compare_row(
                                compile_call(
                                    fused_moe_fp8_block_kernel,
                                    arch,
                                    ours_call(launch, routing, config, arch),
                                ),
                                compile_call(vllm.kernel, arch, theirs_call),
                            )
                        )
                    except Exception as exc:  # noqa: BLE001 - a config either kernel rejects
                        row["error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:300]
                    rows.append(row)
                    print(arch, label, launch["name"], row.get("same_mix"), file=sys.stderr)
    return rows


INTERP_CASES = (  # (M, E, N, K, top_k, config, expert -1 in block 0)
    (
        5,
        4,
        64,
        128,
        2,
        dict(
            BLOCK_SIZE_M=16,
            BLOCK_SIZE_N=32,
            BLOCK_SIZE_K=64,
            GROUP_SIZE_M=1,
            num_warps=4,
            num_stages=2,
        ),
        False,
    ),
    (
        33,
        8,
        96,
        256,
        3,
        dict(
            BLOCK_SIZE_M=32,
            BLOCK_SIZE_N=64,
            BLOCK_SIZE_K=128,
            GROUP_SIZE_M=2,
            num_warps=4,
            num_stages=3,
        ),
        False,
    ),
    (
        20,
        4,
        64,
        128,
        1,
        dict(
            BLOCK_SIZE_M=16,
            BLOCK_SIZE_N=128,
            BLOCK_SIZE_K=128,
            GROUP_SIZE_M=1,
            num_warps=4,
            num_stages=3,
        ),
        True,
    ),
    (
        2,
        32,
        64,
        256,
        4,
        dict(
            BLOCK_SIZE_M=16,
            BLOCK_SIZE_N=64,
            BLOCK_SIZE_K=128,
            GROUP_SIZE_M=1,
            num_warps=4,
            num_stages=4,
        ),
        False,
    ),
)
INTERP_ARCHS = (None, 90)  # no GPU (no SWAP_AB), and SWAP_AB where the config takes it


def interpreter_check(vllm_file: Path) -> dict:
    """Both kernels, each launched by its own host code, on the same inputs under
    TRITON_INTERPRET=1 (set before Triton is imported): both GEMMs of INTERP_CASES, for each of
    INTERP_ARCHS as the architecture the host code sees, inputs from `MoeWorkload.make` (seed M),
    the routing as vLLM's `_prepare_expert_assignment` makes it (the fourth case is naive
    assignment), the down GEMM on a seeded standard-normal activation quantized per 1 x 128
    group; C starts filled with 7 in both, so rows neither writes compare too. The third case
    marks block 0 as another rank's expert (-1), which both must write as zeros.

    Returns:
        {"cases": launches run, "same": launches whose C is bitwise equal, "rows": [{"arch",
        "M", "launch", "swap_ab", "naive", "numel", "written": elements ours changed,
        "differing": elements unequal}]}.
    """
    import torch

    from tuner.kernels.moe.family import expert_shape
    from tuner.kernels.moe.kernel import invoke_moe_gemm
    from tuner.kernels.moe.workload import MoeWorkload, quantize_groups

    vllm = load_vllm(vllm_file)
    rows = []
    for arch in INTERP_ARCHS:
        vllm.platform.arch = arch
        for M, E, N, K, top_k, config, foreign in INTERP_CASES:
            inputs = MoeWorkload.make(
                expert_shape(E, N, K, top_k, BLOCK_SHAPE), M, seed=M, device="cpu"
            )
            sorted_ids, expert_ids, padded = vllm_routing(vllm, inputs.topk_ids, config, E)
            if foreign:
                expert_ids = expert_ids.clone()
                expert_ids[0] = -1
            routing = (sorted_ids, expert_ids, padded)
            torch.manual_seed(M)
            act_q, act_scale = quantize_groups(torch.randn(M * top_k, N), BLOCK_SHAPE[1])
            for launch in launches(E, N, K, top_k, M, device="cpu"):
                if launch["name"] == "gate_up":
                    launch.update(
                        A=inputs.x, A_scale=inputs.x_scale, B=inputs.w1, B_scale=inputs.w1_scale
                    )
                else:
                    launch.update(A=act_q, A_scale=act_scale, B=inputs.w2, B_scale=inputs.w2_scale)
                launch["topk_weights"] = inputs.topk_weights
                outs, seen = [], {}
                for which in ("ours", "vllm"):
                    launch["C"] = torch.full(tuple(launch["C"].shape), 7.0, dtype=torch.bfloat16)
                    if which == "ours":
                        kwargs = ours_call(launch, routing, config, arch)[1]
                        invoke_moe_gemm(
                            launch["A"],
                            launch["A_scale"],
                            launch["B"],
                            launch["B_scale"],
                            launch["C"],
                            launch["topk_weights"],
                            *routing,
                            mul_routed_weight=launch["mul_routed_weight"],
                            top_k=launch["top_k"],
                            config=config,
                            block_shape=BLOCK_SHAPE,
                            arch=arch,
                        )
                        seen = {
                            "swap_ab": kwargs["SWAP_AB"],
                            "naive": kwargs["naive_block_assignment"],
                        }
                    else:
                        vllm_launch(vllm, launch, routing, config)
                    outs.append(launch["C"])
                rows.append(
                    {
                        "arch": arch,
                        "M": M,
                        "launch": launch["name"],
                        **seen,
                        "numel": outs[0].numel(),
                        "written": int((outs[0] != 7).sum()),
                        "differing": int((outs[0] != outs[1]).sum()),
                    }
                )
    return {"cases": len(rows), "same": sum(r["differing"] == 0 for r in rows), "rows": rows}


def summary(rows: list[dict]) -> list[dict]:
    """Per (arch, shape, launch): configs compiled, how many agree on each figure."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["arch"], row["shape"], row["launch"]), []).append(row)
    out = []
    for (arch, shape, launch), group in groups.items():
        done = [r for r in group if "error" not in r]
        out.append(
            {
                "arch": arch,
                "shape": shape,
                "launch": launch,
                "configs": len(group),
                "errors": len(group) - len(done),
                "swap_ab": sum(bool(r.get("swap_ab")) for r in done),
                "naive": sum(bool(r.get("naive")) for r in done),
                "same_shared": sum(r["same_shared"] for r in done),
                "same_regs": sum(r["same_regs"] for r in done),
                "same_mix": sum(r["same_mix"] for r in done),
                "max_instruction_delta": max(
                    (abs(r["instructions"][0] - r["instructions"][1]) for r in done), default=None
                ),
            }
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--vllm-file",
        type=Path,
        required=True,
        help="vLLM's vllm/model_executor/layers/fused_moe/fused_moe.py",
    )
    parser.add_argument(
        "--vllm-source",
        default="",
        help="what the file is (version or commit), recorded in the result",
    )
    parser.add_argument("--arch", type=int, action="append", help="repeat; default 90, 89 and 100")
    parser.add_argument("--configs", type=int, default=CONFIGS)
    parser.add_argument("--shapes", type=int, default=len(SHAPES), help="the first SHAPES")
    parser.add_argument("--out-dir", type=Path, default=OUT_DIR)
    parser.add_argument("--interpret-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    for path in (args.vllm_file, args.vllm_file.parent / "utils.py"):
        if not path.is_file():
            parser.exit(2, f"no such file: {path}\n")
    if args.interpret_only:  # the child process, under TRITON_INTERPRET=1
        print(json.dumps(interpreter_check(args.vllm_file)))
        return
    # Registers come from ptxas's log; a fresh cache makes every compile run ptxas.
    os.environ.update(TRITON_DUMP_PTXAS_LOG="1", TRITON_ALWAYS_COMPILE="1")
    os.environ.pop("TRITON_INTERPRET", None)
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="moe_fidelity_cache_")
    child = subprocess.run(
        [sys.executable, __file__, "--vllm-file", str(args.vllm_file), "--interpret-only"],
        env=dict(os.environ, TRITON_INTERPRET="1"),
        capture_output=True,
        text=True,
    )
    if child.returncode != 0:
        parser.exit(1, f"interpreter check failed:\n{child.stderr[-2000:]}\n")
    interp = json.loads(child.stdout.strip().splitlines()[-1])
    configs, archs = pick_configs(args.configs), args.arch or ARCHS
    rows = compiled_rows(args.vllm_file, archs, configs, SHAPES[: args.shapes])
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    report = {
        "benchmark": "moe_fidelity",
        "date": stamp,
        "host": platform.node(),
        "versions": {name: metadata.version(name) for name in ("triton", "torch")},
        "vllm_file": "/".join(args.vllm_file.parts[-5:]),  # from vllm/, no host path
        "vllm_source": args.vllm_source,
        "block_shape": list(BLOCK_SHAPE),
        "configs": configs,
        "interpreter": interp,
        "summary": summary(rows),
        "rows": rows,
    }
    args.out_dir.mkdir(parents=True, exist_ok=True)
    path = args.out_dir / f"moe_fidelity_{'_'.join(f'sm{a}' for a in archs)}_{stamp}.json"
    path.write_text(json.dumps(report, indent=1) + "\n")
    print(
        "| arch | shape (M) | launch | configs | SWAP_AB | naive | same shared | same regs "
        "| same PTX mix |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for s in report["summary"]:
        print(
            f"| sm{s['arch']} | {s['shape']} | {s['launch']} | {s['configs']} | "
            f"{s['swap_ab']} | {s['naive']} | {s['same_shared']} | {s['same_regs']} | "
            f"{s['same_mix']} |"
        )
    print(f"interpreter: {interp['same']} of {interp['cases']} launches bitwise equal")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
