"""The builtin kernels against a real vLLM's: the same compiled code, the same output.

    pip download vllm==0.33.0 --no-deps -d /tmp/w && unzip -q /tmp/w/vllm-*.whl -d /tmp/w/x
    python bench/vllm_equivalence.py --vllm-root /tmp/w/x   # writes bench/results/...json

--vllm-root is a folder holding `vllm/` (an unzipped wheel or a site-packages). Only two
functions of two files are read, with the ast module, and compiled with this Triton: the dense
`_w8a8_triton_block_scaled_mm` (vllm/model_executor/layers/quantization/utils/fp8_utils.py) and
the fused-MoE `fused_moe_kernel` (fused_moe/fused_moe.py, through bench/moe_fidelity.py); vLLM's
own imports never run and nothing of vLLM is kept in this project.

Dense: for each architecture, config and M, both kernels are compiled for the launch that vLLM's
`w8a8_triton_block_scaled_mm` makes (the same arguments in the same order) and compared on
shared memory, registers, spills and the PTX mix (`tuner.kernels.target`); both also run under
TRITON_INTERPRET=1 on the same inputs (a child process), compared bitwise. MoE: vLLM's kernel
launched by vLLM's own host code (`invoke_fused_moe_triton_kernel`, its routing choice and
utils.py's `enable_swap_ab`), against ours, as bench/moe_fidelity.py compiles them. The hashes a
sweep inside that vLLM records are printed too.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
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

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "bench")]

ARCHS = (90, 89, 100)  # Hopper, Ada and Blackwell
DENSE_FILE = "vllm/model_executor/layers/quantization/utils/fp8_utils.py"
MOE_FILE = "vllm/model_executor/layers/fused_moe/fused_moe.py"
DENSE_KERNEL = "_w8a8_triton_block_scaled_mm"
M_VALUES = (1, 64, 100)  # the three specializations: 1, M % 16 == 0, other
N, K = 4096, 4096
CONFIGS = 8  # vLLM's default first, then a seeded sample of vLLM's space
SEED = 0
OUT_DIR = REPO / "bench" / "results"


def load_dense_kernel(path: Path):
    """vLLM's dense JITFunction, cut out of its file with ast into a temporary module with only
    `import triton` and `import triton.language as tl` above it.

    Raises:
        ValueError: the file has no such function.
    """
    text = Path(path).read_text()
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef) and node.name == DENSE_KERNEL:
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            body = "".join(text.splitlines(keepends=True)[start - 1 : node.end_lineno])
            break
    else:
        raise ValueError(f"{path} has no {DENSE_KERNEL}")
    module_path = Path(tempfile.mkdtemp(prefix="vllm_dense_")) / "vllm_dense_kernel.py"
    module_path.write_text("import triton\nimport triton.language as tl\n\n\n" + body)
    spec = importlib.util.spec_from_file_location("vllm_dense_kernel", module_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, DENSE_KERNEL)


def pick_configs(count: int):
    """vLLM's default, then a seeded sample of vLLM's dense space."""
    from tuner.kernels.dense.space import default_config, vllm_space

    first = default_config()
    rest = [c for c in vllm_space() if c != first]
    return [first, *random.Random(SEED).sample(rest, count - 1)]


def dense_rows(path: Path, archs, configs) -> list[dict]:
    """Every (arch, config, M) compiled with both kernels and compared."""
    from compiled import compile_dense_pair, same_code

    theirs = load_dense_kernel(path)
    rows = []
    for arch in archs:
        for config in configs:
            for M in M_VALUES:
                row = {"arch": arch, "M": M, "config": config.as_dict()}
                try:
                    ours, vllm = compile_dense_pair(theirs, config, arch, M=M, N=N, K=K)
                    row.update(
                        shared=[ours.shared, vllm.shared],
                        n_regs=[ours.n_regs, vllm.n_regs],
                        instructions=[ours.instructions, vllm.instructions],
                        differ=same_code(ours, vllm),
                    )
                except Exception as exc:  # noqa: BLE001 - a config either kernel rejects
                    row["error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:300]
                rows.append(row)
                print(arch, M, config.short(), row.get("differ", row.get("error")), file=sys.stderr)
    return rows


def dense_interpreter(path: Path) -> dict:
    """Both dense kernels on the same small inputs under TRITON_INTERPRET=1 (run in a child
    process with it set): {"cases", "same": launches whose C is bitwise equal}."""
    import torch

    from tuner.kernels.dense.space import default_config
    from tuner.kernels.dense.workload import DenseWorkload
    from tuner.kernels.shape import Shape

    theirs = load_dense_kernel(path)
    cases = same = 0
    for M, n, k in ((1, 256, 256), (33, 384, 512), (64, 256, 384)):
        ours = DenseWorkload.make(Shape(n, k, (128, 128)), M, seed=M, device="cpu")
        vllm = dataclasses.replace(ours, kernel=theirs)
        outs = [
            w.launch(default_config(), w.weights(), out=None, out_dtype=torch.bfloat16)
            for w in (ours, vllm)
        ]
        cases += 1
        same += bool(torch.equal(outs[0], outs[1]))
    return {"cases": cases, "same": same}


def moe_rows(path: Path, archs, count: int) -> list[dict]:
    """bench/moe_fidelity.py's compiled comparison: vLLM's own kernel launched by its own
    `invoke_fused_moe_triton_kernel` against ours, for its first two shapes."""
    spec = importlib.util.spec_from_file_location(
        "moe_fidelity", REPO / "bench" / "moe_fidelity.py"
    )
    mf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mf)
    return mf.compiled_rows(path, archs, mf.pick_configs(count), mf.SHAPES[:2])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--vllm-root",
        type=Path,
        required=True,
        help="a folder holding vllm/ (an unzipped vLLM wheel)",
    )
    parser.add_argument("--arch", type=int, action="append", help="repeat; default 90, 89 and 100")
    parser.add_argument("--configs", type=int, default=CONFIGS)
    parser.add_argument("--no-moe", action="store_true", help="only the dense kernel")
    parser.add_argument("--out-dir", type=Path, default=OUT_DIR)
    parser.add_argument("--interpret-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    dense_path, moe_path = args.vllm_root / DENSE_FILE, args.vllm_root / MOE_FILE
    if not dense_path.is_file():
        parser.exit(2, f"no {DENSE_FILE} under {args.vllm_root}\n")
    if args.interpret_only:  # the child process, under TRITON_INTERPRET=1
        print(json.dumps(dense_interpreter(dense_path)))
        return
    from tuner.kernels.source import source_hash

    os.environ.pop("TRITON_INTERPRET", None)
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="vllm_equivalence_cache_")
    child = subprocess.run(
        [sys.executable, __file__, "--vllm-root", str(args.vllm_root), "--interpret-only"],
        env=dict(os.environ, TRITON_INTERPRET="1"),
        capture_output=True,
        text=True,
    )
    if child.returncode != 0:
        parser.exit(1, f"interpreter check failed:\n{child.stderr[-2000:]}\n")
    interp = json.loads(child.stdout.strip().splitlines()[-1])
    archs = args.arch or ARCHS
    dense = dense_rows(dense_path, archs, pick_configs(args.configs))
    moe = [] if args.no_moe or not moe_path.is_file() else moe_rows(moe_path, archs, args.configs)
    infos = sorted(args.vllm_root.glob("vllm-*.dist-info"))
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    report = {
        "benchmark": "vllm_equivalence",
        "date": stamp,
        "host": platform.node(),
        "versions": {name: metadata.version(name) for name in ("triton", "torch")},
        "vllm": infos[-1].name.removesuffix(".dist-info") if infos else "unknown",
        "hashes": {
            "dense": source_hash(dense_path, DENSE_KERNEL),
            **({"moe": source_hash(moe_path, "fused_moe_kernel")} if moe_path.is_file() else {}),
        },
        "dense_interpreter": interp,
        "dense_same": sum(not r.get("differ", ["error"]) for r in dense),
        "dense_compiled": len(dense),
        "moe_same_mix": sum(bool(r.get("same_mix")) for r in moe),
        "moe_compiled": len(moe),
        "dense": dense,
        "moe": moe,
    }
    args.out_dir.mkdir(parents=True, exist_ok=True)
    path = args.out_dir / f"vllm_equivalence_{'_'.join(f'sm{a}' for a in archs)}_{stamp}.json"
    path.write_text(json.dumps(report, indent=1) + "\n")
    print(
        f"{report['vllm']}: dense same code {report['dense_same']}/{report['dense_compiled']}"
        f", interpreter {interp['same']}/{interp['cases']} bitwise; MoE same PTX mix "
        f"{report['moe_same_mix']}/{report['moe_compiled']}"
    )
    print(f"hashes a sweep inside it records: {report['hashes']}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
