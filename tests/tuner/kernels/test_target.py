"""Compiling the kernels for a GPU target without a GPU (each family's `workload.py`, and doctor's
pair compile, `tuner.kernels.moe.workload.compile_moe_pairs`): what the compiler says, and the same
specialization and compile cache key as Triton's own launcher, so a precompiled binary is the
one a launch looks up. One process without TRITON_INTERPRET
(`compile_probe.py`) does the compiling: once the interpreter has run a kernel, Triton's
language module stays patched in that process and code generation fails."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tuner.kernels.dense.kernel import kernel_source_hash
from tuner.kernels.moe.space import uses_swap_ab

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
    # An A tile (64 x 128) plus a B tile (128 x 128) of fp8 is 24 KiB per pipeline stage.
    assert 24 * 1024 <= shared["default-sm90"] < 100 * 1024
    # 5 stages of 128 x 128 + 128 x 128 fp8 exceed the 99 KiB an sm89 program may use.
    assert shared["too-big-sm89"] > 99 * 1024
    # M = 1 with 128 experts and top_k 8 is vLLM's naive assignment, and the 16x64 tile runs
    # with SWAP_AB on sm90: 16x64x128 tiles, 4 stages of fp8 A and B, all 4 buffered:
    # (16 + 64) * 128 bytes * 4 = 40,960 (vLLM 0.33.0's kernel gives the same: the real-engine
    # lane, tests/engines/test_compile_equivalence.py).
    assert shared["moe-sm90"] == 40960
    assert probe["hash"] == kernel_source_hash()  # with and without the interpreter


def test_doctors_moe_pair_compiles_both_launches_as_their_host_code_makes_them(probe) -> None:
    """Our kernel against a copy of itself under vLLM's name and parameter list (the stand-in
    vLLM), each launched by its own host code: the same code. vLLM's default at M = 1 on sm90
    runs with SWAP_AB and naive assignment (1 x 2 x 4 <= 8 experts): (16 x 128 + 64 x 128)
    fp8 bytes a stage x 4 buffered stages = 40960 bytes."""
    assert probe["moe_pairs"] == [[40960, []], [40960, []]]


def test_the_dense_specialization_and_cache_key_match_tritons_launcher(probe: dict) -> None:
    assert len(probe["dense"]) == 4
    for same, same_key, ours, theirs in probe["dense"]:
        assert same and same_key, f"ours {ours}\ntheirs {theirs}"


def test_the_moe_specialization_is_tritons_binding_of_invoke_moe_gemms_launch(probe) -> None:
    rows = probe["moe"]
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
        assert row["same"], (row["ours"], row["triton"])


def test_swap_ab_follows_vllms_rule_for_the_target_not_the_host() -> None:
    # vLLM 0.33.0's enable_swap_ab: sm90 exactly, BLOCK_SIZE_M < 64, BLOCK_SIZE_N >= 64.
    tiles = ((16, 64, 90), (16, 64, 89), (16, 64, 100), (64, 64, 90), (16, 32, 90), (32, 256, 90))
    assert [uses_swap_ab(*tile) for tile in tiles] == [True, False, False, False, False, True]
    assert uses_swap_ab(16, 64, None) is False  # no GPU: no capability
