"""Whether two Triton kernels compile to the same code for one architecture, without a GPU: shared
memory, registers and spills (ptxas's `-v` log) and the PTX instruction mix, as
`bench/moe_fidelity.py` compares the fused-MoE kernels. Each family pairs its builtin kernel with
vLLM's (`tuner.kernels.dense.fidelity`, `tuner.kernels.moe.fidelity`); `tuner doctor` says
whether each pair is the same code."""

from __future__ import annotations

import contextlib
import io
import os
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

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


def compile_specialized(
    fn: Any, signature: dict, constexprs: dict, attrs: dict, arch: int, options: dict
) -> Compiled:
    """Compile `fn` with a launch's specialization (as `triton.compiler.ASTSource` takes it)
    for GPUTarget("cuda", arch, 32), with ptxas's log on and Triton's cache bypassed.

    Args:
        fn: a JITFunction.
        signature, constexprs, attrs: the launch's specialization (e.g. a family's
            `launch_specialization`).
        arch: compute capability as an int (89, 90, 100, 120).
        options: compile options, e.g. {"num_warps": 4, "num_stages": 3}.

    Raises:
        triton.CompilationError: the kernel does not compile.
    """
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    log = io.StringIO()
    saved = {key: os.environ.get(key) for key in ("TRITON_DUMP_PTXAS_LOG", "TRITON_ALWAYS_COMPILE")}
    os.environ.update(TRITON_DUMP_PTXAS_LOG="1", TRITON_ALWAYS_COMPILE="1")
    try:
        with contextlib.redirect_stdout(log):
            kernel = triton.compile(
                ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs),
                target=GPUTarget("cuda", arch, 32),
                options=options,
            )
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    registers, spills = _REGISTERS.search(log.getvalue()), _SPILLS.search(log.getvalue())
    return Compiled(
        int(kernel.metadata.shared),
        int(registers[1]) if registers else None,
        int(spills[1]) if spills else None,
        ptx_opcodes(kernel.asm["ptx"]),
    )


def compile_launch(fn: Any, arch: int, args: tuple, kwargs: dict) -> Compiled:
    """Compile `fn` for one launch's arguments, specialized by Triton's own launcher binding
    (`create_function_from_signature` and `JITFunction._pack_args`, triton/runtime/jit.py, as
    bench/moe_fidelity.py does), for GPUTarget("cuda", arch, 32).

    Args:
        fn: a JITFunction.
        arch: compute capability as an int (89, 90, ...).
        args, kwargs: what the host code passes to `fn[grid](...)` (tensors may be on "meta").

    Raises:
        triton.CompilationError: the kernel does not compile.
    """
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    backend = make_backend(GPUTarget("cuda", arch, 32))
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    bound, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = fn._pack_args(
        backend, kwargs, bound, specialization, options
    )
    return compile_specialized(fn, signature, constexprs, attrs, arch, options.__dict__)


class Capture:
    """Stands in for a JITFunction: `capture[grid](*args, **kwargs)` records the call."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple, dict]] = []

    def __getitem__(self, grid: Any) -> Any:
        return lambda *args, **kwargs: self.calls.append((args, kwargs))


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
    delta = {
        op
        for op in set(ours.opcodes) | set(theirs.opcodes)
        if ours.opcodes[op] != theirs.opcodes[op]
    }
    if delta:
        differ.append(
            f"PTX mix: {len(delta)} opcode(s) differ ({ours.instructions} vs "
            f"{theirs.instructions} instructions)"
        )
    return differ
