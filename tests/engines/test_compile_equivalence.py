"""The builtin kernels are vLLM 0.33.0's: compiled for sm89, sm90 (and sm100, dense) from the
launches each side's own host code makes, they give the same shared memory, registers, spills
and PTX opcode counts (tests/engines/compiled_code.py, in a child process without the
interpreter), and under TRITON_INTERPRET=1 the same output, bit for bit. A copy of vLLM's MoE
kernel without one line (the int64 cast of the token offsets, issue 38's finding) must differ,
so the comparison can fail."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.engines.compiled_code import FP8_UTILS, FUSED_MOE, MOE_BLOCK_SIZE_M, bench
from tests.engines.engine_code import wheel_text

REPO = Path(__file__).resolve().parents[2]
ARCHS = (89, 90, 100)  # Ada (L20, L40S), Hopper (H100, H200), Blackwell (B200)
MOE_ARCHS = (89, 90)  # with and without vLLM's SWAP_AB
FUSED_MOE_UTILS = "vllm/model_executor/layers/fused_moe/utils.py"
INT64_CAST = "    offs_token = offs_token.to(tl.int64)\n"


@pytest.fixture(scope="module")
def vllm_root(vllm_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The three files of the wheel the comparison reads, at their paths below a folder."""
    root = tmp_path_factory.mktemp("vllm_root")
    for member in (FP8_UTILS, FUSED_MOE, FUSED_MOE_UTILS):
        (root / member).parent.mkdir(parents=True, exist_ok=True)
        (root / member).write_text(wheel_text(vllm_wheel, member))
    return root


def _compiling_env(tmp_path: Path) -> dict[str, str]:
    """A child's environment for compiling: no TRITON_INTERPRET, this repository importable, a
    Triton cache of its own."""
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    env.update(PYTHONPATH=str(REPO), TRITON_CACHE_DIR=str(tmp_path / "triton_cache"))
    return env


_REVERTED_CHILD = """
import json, sys
from pathlib import Path
from tests.engines.compiled_code import FUSED_MOE, bench, moe_configs
mf = bench("moe_fidelity")
rows = mf.compiled_rows(Path(sys.argv[1]) / FUSED_MOE, [89], moe_configs()[:1],
                        [s for s in mf.SHAPES if s[0].startswith("tiny-moe")])
print(json.dumps([row.get("same_mix") for row in rows]))
"""


@pytest.fixture(scope="module")
def children(vllm_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """The compiling children, started at once so that they run side by side (and beside the
    interpreter test): tests/engines/compiled_code.py for dense and MoE, and the MoE comparison
    with a copy of vLLM's kernel without the int64 cast of the token offsets."""
    text = (vllm_root / FUSED_MOE).read_text()
    assert text.count(INT64_CAST) == 1, "vLLM's fused_moe_kernel casts offs_token once"
    reverted = tmp_path_factory.mktemp("reverted")
    for member in (FUSED_MOE, FUSED_MOE_UTILS):
        (reverted / member).parent.mkdir(parents=True, exist_ok=True)
        (reverted / member).write_text((vllm_root / member).read_text())
    (reverted / FUSED_MOE).write_text(text.replace(INT64_CAST, ""))
    module = [sys.executable, "-m", "tests.engines.compiled_code"]
    commands = {
        "dense": [*module, "dense", str(vllm_root), *map(str, ARCHS)],
        "moe": [*module, "moe", str(vllm_root), *map(str, MOE_ARCHS)],
        "reverted": [sys.executable, "-c", _REVERTED_CHILD, str(reverted)],
    }
    started = {}
    for name, command in commands.items():  # output to files: a full pipe would stall a child
        folder = tmp_path_factory.mktemp(name)
        out, err = (open(folder / stream, "w+") for stream in ("out", "err"))
        child = subprocess.Popen(
            command, cwd=REPO, env=_compiling_env(folder), stdout=out, stderr=err
        )
        started[name] = (child, out, err)
    yield started
    for child, out, err in started.values():
        child.kill()
        child.wait()
        out.close()
        err.close()


def finished(started: tuple) -> list:
    """A child's last line of output as JSON, once it has exited 0."""
    child, out, err = started
    child.wait(timeout=1200)
    err.seek(0)
    assert child.returncode == 0, err.read()[-3000:]
    out.seek(0)
    return json.loads(out.read().strip().splitlines()[-1])


def test_both_kernels_give_the_same_output_under_the_interpreter(vllm_root, children) -> None:
    assert os.environ.get("TRITON_INTERPRET") == "1"  # tests/conftest.py
    mf = bench("moe_fidelity")
    # sm90 alone: its cases run with and without SWAP_AB, with and without naive assignment
    # (no GPU, the bench's other arch, runs the same kernel branches without SWAP_AB).
    mf.INTERP_ARCHS = (90,)
    moe = mf.interpreter_check(vllm_root / FUSED_MOE)
    assert [(row["M"], row["launch"], row["differing"]) for row in moe["rows"]] == [
        (M, launch, 0) for M in (5, 33, 20, 2) for launch in ("gate_up", "down")
    ]
    assert [(row["swap_ab"], row["naive"]) for row in moe["rows"]] == [(False, False)] * 2 + [
        (True, False)
    ] * 4 + [(True, True)] * 2
    # every launch wrote (C starts as 7 in both), so equality is not vacuous
    assert all(row["written"] > row["numel"] // 4 for row in moe["rows"])
    dense = bench("vllm_equivalence").dense_interpreter(vllm_root / FP8_UTILS)
    assert dense == {"cases": 3, "same": 3}


def test_the_dense_kernel_compiles_to_vllms_launch(children) -> None:
    rows = finished(children["dense"])
    assert [(row["arch"], row["M"]) for row in rows] == [(89, 1), (90, 64), (100, 100)]
    assert [row for row in rows if row["differ"]] == []
    assert all(row["regs"][0] > 0 and row["shared"][0] > 0 for row in rows)


def test_the_moe_kernel_and_launch_compile_to_vllms(children) -> None:
    rows = finished(children["moe"])
    assert len(rows) == len(MOE_ARCHS) * (len(MOE_BLOCK_SIZE_M) + 1) * 2
    assert [row for row in rows if not row["same"]] == []
    assert sorted({row["config"]["BLOCK_SIZE_M"] for row in rows}) == list(MOE_BLOCK_SIZE_M)
    # vLLM swaps A and B on sm90 only, for BLOCK_SIZE_M < 64 (both launches of 2 configs);
    # it assigns blocks naively for DeepSeek-V3 at M = 1 (both launches, each arch).
    swapped = {(row["arch"], row["config"]["BLOCK_SIZE_M"]) for row in rows if row["swap_ab"]}
    assert swapped == {(90, 16)}
    assert sum(row["naive"] for row in rows) == 2 * len(MOE_ARCHS)


def test_without_the_int64_cast_the_compiled_code_differs(children) -> None:
    assert finished(children["reverted"]) == [False, False]
