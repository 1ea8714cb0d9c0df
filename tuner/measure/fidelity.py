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


def _compile(
    fn: Any, signature: dict, constexprs: dict, attrs: dict, arch: int, options: dict
) -> Compiled:
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


def compile_dense_pair(
    theirs: Any,
    config: KernelConfig,
    arch: int,
    *,
    M: int,
    N: int,
    K: int,
    block_shape: tuple[int, int] = (128, 128),
) -> tuple[Compiled, Compiled]:
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

    signature, constexprs, attrs = launch_specialization(
        config, M, N, K, *block_shape, torch.bfloat16
    )
    names = list(inspect.signature(theirs.fn).parameters)
    if len(names) != len(signature):
        raise ValueError(
            f"the other kernel takes {len(names)} parameters, the builtin "
            f"{len(signature)}: not the same launch"
        )
    renamed = {name: value for name, value in zip(names, signature.values(), strict=True)}
    options = {"num_warps": config.num_warps, "num_stages": config.num_stages}
    return (
        _compile(ours, signature, constexprs, attrs, arch, options),
        _compile(theirs, renamed, constexprs, attrs, arch, options),
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
    return _compile(fn, signature, constexprs, attrs, arch, options.__dict__)


class _Capture:
    """Stands in for a JITFunction: `capture[grid](*args, **kwargs)` records the call."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple, dict]] = []

    def __getitem__(self, grid: Any) -> Any:
        return lambda *args, **kwargs: self.calls.append((args, kwargs))


def _as_on(arch: int, kwargs: dict) -> dict:
    """vLLM's launch arguments as on a GPU of `arch`: vLLM 0.33.0 sets SWAP_AB from the GPU its
    host code sees (fused_moe/utils.py `enable_swap_ab`), which is none in a process without
    one; here it is set from `arch` (`uses_swap_ab`)."""
    from tuner.kernels.moe.specialization import uses_swap_ab

    if "SWAP_AB" not in kwargs:
        return kwargs
    return dict(kwargs, SWAP_AB=uses_swap_ab(kwargs["BLOCK_SIZE_M"], kwargs["BLOCK_SIZE_N"], arch))


def compile_moe_pairs(
    module: str,
    function: str,
    config: KernelConfig,
    arch: int,
    *,
    M: int,
    E: int,
    N: int,
    K: int,
    top_k: int,
    block_shape: tuple[int, int] = (128, 128),
) -> list[tuple[Compiled, Compiled]]:
    """Compile the builtin fused-MoE kernel and vLLM's (`module`.`function`, launched by that
    module's `dispatch_fused_moe_kernel`) for both GEMMs of the expert MLP at M tokens, each
    with the arguments its own host code passes on a GPU of `arch` (captured on "meta"
    tensors: nothing runs), with the routing vLLM uses at M (naive assignment for small
    batches, `uses_naive_assignment`).

    Args:
        module, function: vLLM's fused_moe module and kernel (`tuner.kernels.moe.family.VLLM_MOE`).
        config: vLLM's six keys.
        arch: compute capability as an int.
        M: tokens; E experts; N the per-rank intermediate size; K the hidden size; top_k.
        block_shape: [group_n, group_k].

    Returns:
        [(builtin's, vLLM's)] for the gate_up GEMM (B [E, 2N, K]) and the down GEMM (B [E, K, N]).

    Raises:
        ImportError, AttributeError: no such vLLM module or kernel.
        triton.CompilationError: either kernel does not compile.
    """
    import importlib

    from tuner.kernels.moe.kernel import fused_moe_fp8_block_kernel, invoke_moe_gemm
    from tuner.kernels.moe.vllm_workload import vllm_moe_gemm

    vllm = importlib.import_module(module)
    theirs_fn = getattr(vllm, function)
    routing = _meta_routing(M, top_k, E, config.BLOCK_SIZE_M)
    pairs = []
    for rows, n, k, launch_top_k, weighted in (
        (M, 2 * N, K, top_k, False),
        (M * top_k, K, N, 1, True),
    ):
        tensors = (
            *_meta_operands(
                rows * launch_top_k, rows, n, k, E=E, M=M, top_k=top_k, block_shape=block_shape
            ),
            *routing,
        )
        ours, theirs = _Capture(), _Capture()
        invoke_moe_gemm(
            *tensors,
            mul_routed_weight=weighted,
            top_k=launch_top_k,
            config=config.as_dict(),
            block_shape=block_shape,
            arch=arch,
            kernel=ours,
        )
        setattr(vllm, function, theirs)
        try:
            vllm_moe_gemm(
                *tensors,
                mul_routed_weight=weighted,
                top_k=launch_top_k,
                config=config.as_dict(),
                block_shape=block_shape,
                module=module,
            )
        finally:
            setattr(vllm, function, theirs_fn)
        (ours_args, ours_kwargs), (their_args, their_kwargs) = ours.calls[0], theirs.calls[0]
        pairs.append(
            (
                compile_launch(fused_moe_fp8_block_kernel, arch, ours_args, ours_kwargs),
                compile_launch(theirs_fn, arch, their_args, _as_on(arch, their_kwargs)),
            )
        )
    return pairs


def _meta_routing(M: int, top_k: int, E: int, block_m: int) -> tuple:
    """The routing tensors (sorted token ids, expert ids, number of post-padded tokens) on
    "meta" as vLLM routes M tokens: naive assignment for small batches (no sorted ids,
    `uses_naive_assignment`), else padded to `block_m` per expert (`max_padded_slots`)."""
    import torch

    from tuner.kernels.moe.specialization import max_padded_slots, uses_naive_assignment

    meta, ids = "meta", torch.int32
    if uses_naive_assignment(M, top_k, E):
        return (
            None,
            torch.empty(M * top_k, dtype=ids, device=meta),
            torch.empty(1, dtype=ids, device=meta),
        )
    padded = max_padded_slots(M * top_k, E, block_m)
    return (
        torch.empty(padded, dtype=ids, device=meta),
        torch.empty(-(-padded // block_m), dtype=ids, device=meta),
        torch.empty(1, dtype=ids, device=meta),
    )


def _meta_operands(
    out_rows: int,
    rows: int,
    n: int,
    k: int,
    *,
    E: int,
    M: int,
    top_k: int,
    block_shape: tuple[int, int],
) -> tuple:
    """One expert GEMM's operands on "meta": A [rows, k] FP8 and its block scales, B
    [E, n, k] FP8 and its block scales, the bf16 output [out_rows, n], the routing weights
    [M, top_k]."""
    import torch

    meta, fp8, (gn, gk) = "meta", torch.float8_e4m3fn, block_shape
    return (
        torch.empty(rows, k, dtype=fp8, device=meta),
        torch.empty(rows, -(-k // gk), device=meta),
        torch.empty(E, n, k, dtype=fp8, device=meta),
        torch.empty(E, -(-n // gn), -(-k // gk), device=meta),
        torch.empty(out_rows, n, dtype=torch.bfloat16, device=meta),
        torch.empty(M, top_k, device=meta),
    )


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
