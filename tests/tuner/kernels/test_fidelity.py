"""The fused-MoE pair compile of `tuner doctor` (`tuner.kernels.moe.fidelity`, on
`tuner.kernels.fidelity`): vLLM's SWAP_AB rule for the target architecture and the PTX count
(the compile itself: test_target.py)."""

from __future__ import annotations

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
