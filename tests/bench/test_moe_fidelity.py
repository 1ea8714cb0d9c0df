"""bench/moe_fidelity.py: PTX opcode counts, loading vLLM's kernel from its file, and (when a vLLM
fused_moe.py is at hand) the same interpreter output and compiled code as ours."""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("moe_fidelity", REPO / "bench" / "moe_fidelity.py")
mf = importlib.util.module_from_spec(SPEC)
sys.modules["moe_fidelity"] = mf
SPEC.loader.exec_module(mf)


def _vllm_file() -> Path | None:
    """vLLM's fused_moe.py: $VLLM_FUSED_MOE_FILE, else an installed vLLM's; None if neither."""
    if os.environ.get("VLLM_FUSED_MOE_FILE"):
        path = Path(os.environ["VLLM_FUSED_MOE_FILE"])
        return path if path.is_file() else None
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "model_executor/layers/fused_moe"
    return path / "fused_moe.py" if (path / "fused_moe.py").is_file() else None


VLLM_FILE = _vllm_file()
needs_vllm = pytest.mark.skipif(VLLM_FILE is None, reason="no vLLM fused_moe.py: set "
                                "VLLM_FUSED_MOE_FILE to one (bench/README.md, MoE fidelity)")

PTX = """
.visible .entry k(
\t.param .u64 .ptr .global .align 1 k_param_0
)
{
\t.reg .pred \t%p<3>;
\tmov.u32 \t%r1, %ctaid.x; // the program id
\tsetp.lt.s32 \t%p1, %r1, 4;
\t@%p1 ld.global.v4.b32 { %r2, %r3, %r4, %r5 }, [ %rd1 + 0 ];
\t// begin inline asm
\t{ cvt.rn.bf16x2.f32 %r6, %r7, %r8; }
\t// end inline asm
$L__BB0_2:
\t@!%p1 bra \t$L__BB0_2;
\tsetp.lt.s32 \t%p2, %r1, 8;
\tret;
}
"""


def test_ptx_opcodes_counts_instructions_by_full_opcode():
    """The count both the bench's compile (`compile_call`) and tuner doctor use."""
    from tuner.measure.fidelity import ptx_opcodes

    assert ptx_opcodes(PTX) == Counter({
        "mov.u32": 1, "setp.lt.s32": 2, "ld.global.v4.b32": 1, "cvt.rn.bf16x2.f32": 1,
        "bra": 1, "ret": 1})


def test_compare_row_lists_the_opcodes_that_differ():
    ours = {"shared": 100, "n_regs": 80, "spill_bytes": 0,
            "opcodes": Counter({"add.s32": 3, "ret": 1})}
    theirs = {"shared": 100, "n_regs": 88, "spill_bytes": 0,
              "opcodes": Counter({"add.s32": 1, "mul.lo.s32": 2, "ret": 1})}
    row = mf.compare_row(ours, theirs)
    assert row == {"shared": [100, 100], "n_regs": [80, 88], "spill_bytes": [0, 0],
                   "instructions": [4, 4], "opcode_delta": {"add.s32": 2, "mul.lo.s32": -2},
                   "same_shared": True, "same_regs": False, "same_mix": False}


def test_load_vllm_kernel_takes_only_the_two_functions(tmp_path):
    source = tmp_path / "fused_moe.py"
    source.write_text(
        "import vllm.envs as envs  # never executed by the loader\n"
        "from vllm.triton_utils import tl, triton\n\n\n"
        "@triton.jit\ndef write_zeros_to_output(c_ptr, N):\n    pass\n\n\n"
        "def unrelated():\n    raise SystemExit\n\n\n"
        "@triton.jit\ndef fused_moe_kernel(a_ptr, N, BLOCK_SIZE_M: tl.constexpr):\n"
        "    write_zeros_to_output(a_ptr, N)\n")
    kernel = mf.load_vllm_kernel(source)
    assert list(inspect.signature(kernel.fn).parameters) == ["a_ptr", "N", "BLOCK_SIZE_M"]
    assert "unrelated" not in kernel.fn.__globals__ and "envs" not in kernel.fn.__globals__


def test_load_vllm_kernel_says_which_function_is_missing(tmp_path):
    source = tmp_path / "fused_moe.py"
    source.write_text("def write_zeros_to_output():\n    pass\n")
    with pytest.raises(ValueError, match=r"fused_moe\.py has no fused_moe_kernel$"):
        mf.load_vllm_kernel(source)


def test_the_bench_refuses_a_missing_file_in_one_line(tmp_path):
    done = subprocess.run([sys.executable, str(REPO / "bench" / "moe_fidelity.py"),
                           "--vllm-file", str(tmp_path / "nope.py")],
                          capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert (done.returncode, done.stdout, done.stderr) == (
        2, "", f"no such file: {tmp_path / 'nope.py'}\n")


@needs_vllm
def test_both_kernels_give_the_same_output_under_the_interpreter():
    assert os.environ.get("TRITON_INTERPRET") == "1"  # tests/conftest.py
    result = mf.interpreter_check(mf.load_vllm_kernel(VLLM_FILE))
    assert result["cases"] == 6
    assert [(r["M"], r["launch"], r["differing"]) for r in result["rows"]] == [
        (5, "gate_up", 0), (5, "down", 0), (33, "gate_up", 0), (33, "down", 0),
        (20, "gate_up", 0), (20, "down", 0)]
    # every launch wrote something (C starts as 7 in both), so equality is not vacuous
    assert all(r["written"] > r["numel"] // 4 for r in result["rows"])


COMPILE = """
import json, sys
from pathlib import Path
import triton, torch
sys.path.insert(0, "bench")
import moe_fidelity as mf
if "nvidia" not in triton.backends.backends:
    print(json.dumps({"skip": "this Triton has no NVIDIA backend"})); raise SystemExit
config = mf.pick_configs(1)[0]
rows = mf.compiled_rows(Path(sys.argv[1]), (90,), [config], [mf.SHAPES[2]])
print(json.dumps([{k: r.get(k) for k in ("launch", "shared", "n_regs", "opcode_delta", "error")}
                  for r in rows]))
"""


@needs_vllm
def test_both_kernels_compile_to_the_same_code_for_sm90(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(PYTHONPATH=str(REPO), TRITON_CACHE_DIR=str(tmp_path), TRITON_DUMP_PTXAS_LOG="1",
               TRITON_ALWAYS_COMPILE="1")
    done = subprocess.run([sys.executable, "-c", COMPILE, str(VLLM_FILE)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if isinstance(result, dict):
        pytest.skip(result["skip"])
    assert [r["launch"] for r in result] == ["gate_up", "down"]
    for row in result:
        assert row["error"] is None
        assert row["shared"][0] == row["shared"][1] > 0
        assert row["n_regs"][0] == row["n_regs"][1] > 0
        assert row["opcode_delta"] == {}
