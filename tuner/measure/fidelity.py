"""Whether the builtin dense kernel compiles to the same code as another copy of it (the installed
vLLM's `_w8a8_triton_block_scaled_mm`) for one architecture, without a GPU: shared memory,
registers and spills (ptxas's `-v` log) and the PTX instruction mix, as `bench/moe_fidelity.py`
compares the fused-MoE kernels."""

from __future__ import annotations

import contextlib
import inspect
import io
import os
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from tuner.kernels.config import KernelConfig

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
    """What the compiler says about one kernel binary.

    Attributes:
        shared: shared memory per program, bytes.
        n_regs: registers per thread (None when ptxas logged none).
        spill_bytes: bytes of spill stores (None when ptxas logged none).
        opcodes: PTX instructions by opcode.
    """

    shared: int
    n_regs: int | None
    spill_bytes: int | None
    opcodes: Counter

    @property
    def instructions(self) -> int:
        """PTX instructions in all."""
        return sum(self.opcodes.values())


def _compile(fn: Any, signature: dict, constexprs: dict, attrs: dict, arch: int,
             config: KernelConfig) -> Compiled:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    log = io.StringIO()
    saved = {key: os.environ.get(key) for key in ("TRITON_DUMP_PTXAS_LOG",
                                                  "TRITON_ALWAYS_COMPILE")}
    os.environ.update(TRITON_DUMP_PTXAS_LOG="1", TRITON_ALWAYS_COMPILE="1")
    try:
        with contextlib.redirect_stdout(log):
            kernel = triton.compile(
                ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs),
                target=GPUTarget("cuda", arch, 32),
                options={"num_warps": config.num_warps, "num_stages": config.num_stages})
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    registers, spills = _REGISTERS.search(log.getvalue()), _SPILLS.search(log.getvalue())
    return Compiled(int(kernel.metadata.shared), int(registers[1]) if registers else None,
                    int(spills[1]) if spills else None, ptx_opcodes(kernel.asm["ptx"]))


def compile_dense_pair(theirs: Any, config: KernelConfig, arch: int, *, M: int, N: int, K: int,
                       block_shape: tuple[int, int] = (128, 128)) -> tuple[Compiled, Compiled]:
    """Compile the builtin dense kernel and `theirs` (a JITFunction taking the same arguments in
    the same order, as vLLM's `_w8a8_triton_block_scaled_mm` does: its names differ) for one
    launch, specialized as Triton's launcher specializes it (`launch_specialization`).

    Args:
        theirs: the other kernel.
        config: vLLM's six keys.
        arch: compute capability as an int (89, 90, 100, 120).
        M, N, K: the launch's dimensions.
        block_shape: [group_n, group_k].

    Returns:
        (builtin's, theirs).

    Raises:
        ValueError: `theirs` has another number of parameters.
        triton.CompilationError: either kernel does not compile.
    """
    import torch

    from tuner.kernels.dense.kernel import w8a8_block_fp8_matmul_kernel as ours
    from tuner.kernels.dense.target import launch_specialization

    signature, constexprs, attrs = launch_specialization(config, M, N, K, *block_shape,
                                                         torch.bfloat16)
    names = list(inspect.signature(theirs.fn).parameters)
    if len(names) != len(signature):
        raise ValueError(f"the other kernel takes {len(names)} parameters, the builtin "
                         f"{len(signature)}: not the same launch")
    renamed = {name: value for name, value in zip(names, signature.values(), strict=True)}
    return (_compile(ours, signature, constexprs, attrs, arch, config),
            _compile(theirs, renamed, constexprs, attrs, arch, config))


def same_code(ours: Compiled, theirs: Compiled) -> list[str]:
    """What differs between two binaries, one phrase each; [] when shared memory, registers,
    spills and the PTX mix all agree."""
    differ = []
    if ours.shared != theirs.shared:
        differ.append(f"shared memory {ours.shared} vs {theirs.shared} bytes")
    if ours.n_regs != theirs.n_regs:
        differ.append(f"registers {ours.n_regs} vs {theirs.n_regs}")
    if ours.spill_bytes != theirs.spill_bytes:
        differ.append(f"spills {ours.spill_bytes} vs {theirs.spill_bytes} bytes")
    delta = {op for op in set(ours.opcodes) | set(theirs.opcodes)
             if ours.opcodes[op] != theirs.opcodes[op]}
    if delta:
        differ.append(f"PTX mix: {len(delta)} opcode(s) differ ({ours.instructions} vs "
                      f"{theirs.instructions} instructions)")
    return differ
