"""The equivalence lane's compile: a kernel compiled for a GPU target without a GPU, with
ptxas's log, read back as what the compiler says of the binary (shared memory, registers,
spills, the PTX instruction mix), and two kernels' binaries compared (`same_code`): ours and
vLLM's, each launched by its own host code (`compile_dense_pair`, `compile_moe_pairs`).
bench/vllm_equivalence.py, bench/moe_fidelity.py and tests/engines use it."""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any
from unittest import mock

from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.kernel import w8a8_block_fp8_matmul_kernel
from tuner.kernels.dense.space import DEFAULT_BLOCK_SHAPE
from tuner.kernels.dense.workload import captured_launch
from tuner.kernels.moe.family import VLLM_MOE
from tuner.kernels.moe.kernel import fused_moe_fp8_block_kernel, invoke_moe_gemm
from tuner.kernels.moe.space import uses_swap_ab
from tuner.kernels.moe.workload import meta_gemms, vllm_moe_gemm
from tuner.kernels.shape import Shape
from tuner.kernels.target import Capture, captured, compile_call

_REGISTERS = re.compile(r"Used (\d+) registers")
_SPILLS = re.compile(r"(\d+) bytes spill stores")


def ptx_opcodes(ptx: str) -> Counter:
    """Instructions of a PTX text counted by full opcode (`ld.global.v4.b32`), predicates
    dropped; directives, labels, braces and comments are not instructions."""
    counts: Counter = Counter()
    for line in ptx.splitlines():
        for statement in line.split("//", 1)[0].split(";")[:-1]:
            tokens = statement.strip().lstrip("{").split()
            tokens = tokens[1:] if tokens and tokens[0].startswith("@") else tokens
            if tokens and not tokens[0].startswith("."):
                counts[tokens[0]] += 1
    return counts


@dataclass(frozen=True)
class Compiled:
    """What the compiler says of one binary: shared memory per program (bytes), registers per
    thread and spill-store bytes (None when ptxas logged none), PTX instructions by opcode."""

    shared: int
    n_regs: int | None
    spill_bytes: int | None
    opcodes: Counter

    @property
    def instructions(self) -> int:
        """PTX instructions in all."""
        return sum(self.opcodes.values())


def compile_launch(fn: Any, arch: int, args: tuple, kwargs: dict) -> Compiled:
    """`compile_call` with ptxas's log on and Triton's cache bypassed, read back as `Compiled`."""
    log = io.StringIO()
    knobs = {"TRITON_DUMP_PTXAS_LOG": "1", "TRITON_ALWAYS_COMPILE": "1"}
    with mock.patch.dict(os.environ, knobs), contextlib.redirect_stdout(log):
        kernel = compile_call(fn, arch, args, kwargs)
    registers, spills = _REGISTERS.search(log.getvalue()), _SPILLS.search(log.getvalue())
    return Compiled(
        int(kernel.metadata.shared),
        int(registers[1]) if registers else None,
        int(spills[1]) if spills else None,
        ptx_opcodes(kernel.asm["ptx"]),
    )


def same_code(ours: Any, theirs: Any) -> list[str]:
    """What differs between two binaries (`tuner.kernels.target.Compiled`), one phrase each;
    [] when shared memory, registers, spills and the PTX mix all agree."""
    differ = [
        f"{label} {getattr(ours, name)} vs {getattr(theirs, name)}{unit}"
        for label, name, unit in (
            ("shared memory", "shared", " bytes"),
            ("registers", "n_regs", ""),
            ("spills", "spill_bytes", " bytes"),
        )
        if getattr(ours, name) != getattr(theirs, name)
    ]
    delta = {op for op in ours.opcodes | theirs.opcodes if ours.opcodes[op] != theirs.opcodes[op]}
    if delta:
        differ.append(
            f"PTX mix: {len(delta)} opcode(s) differ ({ours.instructions} vs "
            f"{theirs.instructions} instructions)"
        )
    return differ


def compile_dense_pair(
    theirs: Any, config: KernelConfig, arch: int, *, M: int, N: int, K: int
) -> tuple[Compiled, Compiled]:
    """(builtin's, theirs) `Compiled` for one launch at M x N x K with [128, 128] blocks
    (`captured_launch`): the builtin kernel and `theirs`, a JITFunction taking the same
    arguments (vLLM's `_w8a8_triton_block_scaled_mm`).

    Raises:
        TypeError: `theirs` takes other arguments.
        triton.CompilationError: either kernel does not compile.
    """
    launch = captured_launch(config, M, Shape(N, K, DEFAULT_BLOCK_SHAPE))
    ours = compile_launch(w8a8_block_fp8_matmul_kernel, arch, *launch)
    return ours, compile_launch(theirs, arch, *launch)


def compile_moe_pairs(
    config: KernelConfig, arch: int, *, shape: Shape, M: int
) -> list[tuple[Compiled, Compiled]]:
    """[(builtin's, vLLM's)] `Compiled` for both GEMMs (`meta_gemms`): each kernel with the
    arguments its own host code passes (vLLM's: `dispatch_fused_moe_kernel` of
    `tuner.kernels.moe.family.VLLM_MOE`'s module) on a GPU of `arch`. vLLM sets SWAP_AB from
    the GPU it sees (none here); it is set from `arch` (`uses_swap_ab`).

    Raises:
        ImportError, AttributeError: no such vLLM module or kernel.
        triton.CompilationError: either kernel does not compile.
    """
    vllm, kernel = importlib.import_module(VLLM_MOE.module), VLLM_MOE.kernel()
    pairs = []
    for args, launch in meta_gemms(config, shape, M):
        ours, theirs = captured(invoke_moe_gemm, *args, **launch, arch=arch), Capture()
        setattr(vllm, VLLM_MOE.function, theirs)
        try:
            vllm_moe_gemm(*args, **launch, module=VLLM_MOE.module)
        finally:
            setattr(vllm, VLLM_MOE.function, kernel)
        their_args, kwargs = theirs.calls[0]
        if "SWAP_AB" in kwargs:
            swap = uses_swap_ab(kwargs["BLOCK_SIZE_M"], kwargs["BLOCK_SIZE_N"], arch)
            kwargs = dict(kwargs, SWAP_AB=swap)
        ours_compiled = compile_launch(fused_moe_fp8_block_kernel, arch, *ours)
        pairs.append((ours_compiled, compile_launch(kernel, arch, their_args, kwargs)))
    return pairs
