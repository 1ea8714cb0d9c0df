"""bench/moe_fidelity.py and bench/vllm_moe_host.py: PTX opcode counts, the row comparison,
loading vLLM's kernel from its file. Their comparison against vLLM 0.33.0's own files (compiled
code, interpreter output) runs in the real-engine lane, tests/engines/test_compile_equivalence.py.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("moe_fidelity", REPO / "bench" / "moe_fidelity.py")
mf = importlib.util.module_from_spec(SPEC)
sys.modules["moe_fidelity"] = mf
SPEC.loader.exec_module(mf)
host = sys.modules["vllm_moe_host"]  # bench/vllm_moe_host.py, which moe_fidelity imports


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
    from compiled import ptx_opcodes  # bench/compiled.py, on the path moe_fidelity sets

    assert ptx_opcodes(PTX) == Counter(
        {"mov.u32": 1, "setp.lt.s32": 2, "ld.global.v4.b32": 1, "cvt.rn.bf16x2.f32": 1}
    ) + Counter(bra=1, ret=1)


def test_compare_row_lists_the_opcodes_that_differ():
    ours = {"shared": 100, "n_regs": 80, "spill_bytes": 0, "opcodes": Counter(add=3, ret=1)}
    theirs = {**ours, "n_regs": 88, "opcodes": Counter(add=1, mul=2, ret=1)}
    assert mf.compare_row(ours, theirs) == {
        **{"shared": [100, 100], "n_regs": [80, 88], "spill_bytes": [0, 0]},
        **{"instructions": [4, 4], "opcode_delta": {"add": 2, "mul": -2}},
        **{"same_shared": True, "same_regs": False, "same_mix": False},
    }


def test_load_vllm_kernel_takes_only_the_two_functions(tmp_path):
    source = tmp_path / "fused_moe.py"
    source.write_text(
        "import vllm.envs as envs  # never executed by the loader\n"
        "from vllm.triton_utils import tl, triton\n\n\n"
        "@triton.jit\ndef write_zeros_to_output(c_ptr, N):\n    pass\n\n\n"
        "def unrelated():\n    raise SystemExit\n\n\n"
        "@triton.jit\ndef fused_moe_kernel(a_ptr, N, BLOCK_SIZE_M: tl.constexpr):\n"
        "    write_zeros_to_output(a_ptr, N)\n"
    )
    kernel = host.load_vllm_kernel(source)
    assert list(inspect.signature(kernel.fn).parameters) == ["a_ptr", "N", "BLOCK_SIZE_M"]
    assert "unrelated" not in kernel.fn.__globals__ and "envs" not in kernel.fn.__globals__


def test_load_vllm_kernel_says_which_function_is_missing(tmp_path):
    source = tmp_path / "fused_moe.py"
    source.write_text("def write_zeros_to_output():\n    pass\n")
    with pytest.raises(ValueError, match=r"fused_moe\.py has no fused_moe_kernel$"):
        host.load_vllm_kernel(source)


def test_the_bench_refuses_a_missing_file_in_one_line(tmp_path, monkeypatch, capsys):
    missing = tmp_path / "nope.py"
    monkeypatch.setattr(sys, "argv", ["moe_fidelity.py", "--vllm-file", str(missing)])
    with pytest.raises(SystemExit) as exited:
        mf.main()
    assert (exited.value.code, capsys.readouterr()) == (2, ("", f"no such file: {missing}\n"))
