"""The fused-MoE pair compile of `tuner doctor` (`tuner.kernels.moe.fidelity`, on
`tuner.kernels.fidelity`): vLLM's SWAP_AB rule for the target architecture, and a kernel compiled
from the launch its host code makes."""

from __future__ import annotations

import os
import subprocess
import sys

from tuner.kernels.fidelity import ptx_opcodes
from tuner.kernels.moe.fidelity import as_on


def test_swap_ab_follows_vllms_rule_for_the_target_not_the_host() -> None:
    small = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "SWAP_AB": False}
    assert as_on(90, small) == dict(small, SWAP_AB=True)
    assert as_on(89, dict(small, SWAP_AB=True)) == dict(small, SWAP_AB=False)
    assert as_on(100, dict(small, SWAP_AB=True)) == dict(small, SWAP_AB=False)
    assert as_on(90, dict(small, BLOCK_SIZE_M=64))["SWAP_AB"] is False
    assert as_on(90, dict(small, BLOCK_SIZE_N=32))["SWAP_AB"] is False
    assert as_on(90, dict(small, BLOCK_SIZE_M=32, BLOCK_SIZE_N=256))["SWAP_AB"] is True
    other = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64}  # a kernel without SWAP_AB: untouched
    assert as_on(90, other) == other


def test_ptx_opcodes_counts_full_opcodes_without_predicates() -> None:
    ptx = (
        "\t@%p1 ld.global.v4.b32 {%r1, %r2, %r3, %r4}, [%rd1]; // load\n"
        ".reg .b32 %r<5>;\n$L__BB0_1:\n\tsetp.lt.s32 %p1, %r1, 4; setp.lt.s32 %p2, %r2, 4;\n"
    )
    assert ptx_opcodes(ptx) == {"ld.global.v4.b32": 1, "setp.lt.s32": 2}


def test_the_builtin_moe_kernel_against_itself_renamed_compiles_to_the_same_code(tmp_path) -> None:
    # In a child without TRITON_INTERPRET: the kernels must be JITFunctions to compile.
    script = (
        "from tests.standin_vllm import build_standin\n"
        "from pathlib import Path\nimport sys\n"
        f"sys.path.insert(0, str(build_standin(Path({str(tmp_path / 'site')!r}))))\n"
        "from tuner.kernels.moe.space import default_config\n"
        "from tuner.kernels.fidelity import same_code\n"
        "from tuner.kernels.moe.fidelity import compile_moe_pairs\n"
        "pairs = compile_moe_pairs('vllm.model_executor.layers.fused_moe.fused_moe',\n"
        "    'fused_moe_kernel', default_config(1), 90, M=1, E=8, N=256, K=512, top_k=2)\n"
        "print([(o.shared, same_code(o, t)) for o, t in pairs])\n"
    )
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    run = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stderr[-2000:]
    # vLLM's default at M = 1: BLOCK_SIZE_M 16, BLOCK_SIZE_N 64, BLOCK_SIZE_K 128, 4 stages, on
    # sm90 with SWAP_AB (and naive assignment: 1 x 2 x 4 <= 8 experts): (16 x 128 + 64 x 128)
    # fp8 bytes a stage x 4 buffered stages = 40960 bytes.
    assert run.stdout.strip().splitlines()[-1] == "[(40960, []), (40960, [])]"
