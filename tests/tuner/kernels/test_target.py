"""Compiling the kernels for a GPU target without a GPU (each family's `compile_for_target`, and
the equivalence lane's pairs, bench/compiled.py): what the compiler says of launches captured
from the host code as vLLM makes them. One process without TRITON_INTERPRET
(`compile_probe.py`) does the compiling: once the interpreter has run a kernel, Triton's
language module stays patched in that process and code generation fails."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tuner.kernels.config import KernelConfig
from tuner.kernels.moe.kernel import fused_moe_fp8_block_kernel, invoke_moe_gemm
from tuner.kernels.moe.space import uses_swap_ab
from tuner.kernels.moe.workload import meta_gemms
from tuner.kernels.shape import Shape
from tuner.kernels.target import Capture

REPO_ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> dict:
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path_factory.mktemp("triton-cache"))
    env["TRITON_DEFAULT_FP_FUSION"] = "1"  # Triton 3.9 warns when unset; 1 is its default
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "-m", "tests.tuner.kernels.compile_probe"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if "skip" in result:
        pytest.skip(result["skip"])
    return result


def test_the_kernels_compile_for_ada_and_hopper_without_a_gpu(probe: dict) -> None:
    shared = probe["shared"]
    # 5 stages of 128 x 128 + 128 x 128 fp8 exceed the 99 KiB an sm89 program may use.
    assert shared["too-big-sm89"] > 99 * 1024
    # M = 1 with 8 experts and top_k 2 is vLLM's naive assignment, and the 16x64 tile runs
    # with SWAP_AB on sm90: 16x64x128 tiles, 4 stages of fp8 A and B, all 4 buffered:
    # (16 + 64) * 128 bytes * 4 = 40,960 (vLLM 0.33.0's kernel gives the same: the real-engine
    # lane, tests/engines/test_compile_equivalence.py).
    assert shared["moe-sm90"] == 40960


def test_doctors_pairs_compile_as_their_host_code_launches_them(probe) -> None:
    """Our kernels against copies of themselves under vLLM's names and parameter lists (the
    stand-in vLLM), each launched by its own host code: the same code. vLLM's MoE default at
    M = 1 on sm90 runs with SWAP_AB and naive assignment (1 x 2 x 4 <= 8 experts): (16 x 128 +
    64 x 128) fp8 bytes a stage x 4 buffered stages = 40960 bytes, in both GEMMs."""
    (dense_shared, dense_differ), *moe = probe["pairs"]
    # vLLM's dense default: an A tile (64 x 128) plus a B tile (128 x 128) of fp8 is 24 KiB per
    # pipeline stage.
    assert 24 * 1024 <= dense_shared < 100 * 1024 and dense_differ == []
    assert moe == [[40960, []], [40960, []]]


def test_invoke_moe_gemm_launches_as_vllm_does() -> None:
    """Naive assignment, SWAP_AB and stride_bsn of each GEMM's launch (`meta_gemms`, captured):
    tiny-moe has one block of N in both GEMMs (stride 0, as vLLM 0.33.0 passes it); Qwen3-30B-A3B
    runs SWAP_AB on sm90 and not on sm89; DeepSeek-V3 at M = 1 runs naive assignment."""
    found = []
    for M, E, N, K, top_k, bm, bn, arch in (
        (33, 4, 64, 128, 2, 16, 64, 89),
        (256, 128, 768, 2048, 8, 16, 128, 90),
        (256, 128, 768, 2048, 8, 64, 128, 89),
        (1, 256, 256, 7168, 8, 16, 64, 90),
    ):
        config = KernelConfig(bm, bn, 128, 1, 4, 3)
        shape = Shape(N, K, (128, 128), (("E", E), ("top_k", top_k)))
        for args, launch in meta_gemms(config, shape, M):
            capture = Capture()
            invoke_moe_gemm(*args, **launch, arch=arch, kernel=capture)
            (args, kwargs), names = capture.calls[0], fused_moe_fp8_block_kernel.arg_names
            stride_bsn = args[names.index("stride_bsn")]
            found.append((kwargs["naive_block_assignment"], kwargs["SWAP_AB"], stride_bsn))
    # (naive_block_assignment, SWAP_AB, stride_bsn) of the gate_up and the down GEMM
    assert found == [
        *((False, False, 0), (False, False, 0)),
        *((False, True, 16), (False, True, 6)),
        *((False, False, 16), (False, False, 6)),
        *((True, True, 56), (True, True, 2)),
    ]


def test_swap_ab_follows_vllms_rule_for_the_target_not_the_host() -> None:
    # vLLM 0.33.0's enable_swap_ab: sm90 exactly, BLOCK_SIZE_M < 64, BLOCK_SIZE_N >= 64.
    tiles = ((16, 64, 90), (16, 64, 89), (16, 64, 100), (64, 64, 90), (16, 32, 90), (32, 256, 90))
    assert [uses_swap_ab(*tile) for tile in tiles] == [True, False, False, False, False, True]
    assert uses_swap_ab(16, 64, None) is False  # no GPU: no capability
