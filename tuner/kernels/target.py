"""Compiling a family's Triton kernel for a GPU architecture without a GPU (Triton's wheel carries
ptxas): one launch, captured from the host code on "meta" tensors, bound by Triton's own
launcher binding, so the binary lands under that launch's cache key (bench/compiled.py compares
two kernels' binaries with it)."""

from __future__ import annotations

from typing import Any

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, CompiledKernel, make_backend
from triton.runtime.jit import JITFunction, create_function_from_signature

from tuner.core import DEFAULT_OUT_DTYPE

# The output dtype compiled for when none is asked (`tuner.core.DEFAULT_OUT_DTYPE`, serving's).
DEFAULT_TORCH_DTYPE: torch.dtype = getattr(torch, DEFAULT_OUT_DTYPE)

# (signature, constexprs, attrs) as `triton.compiler.ASTSource` takes them.
Specialization = tuple[dict[str, str], dict[tuple[int, ...], Any], dict[tuple[int, ...], list]]


class Capture:
    """Stands in for a JITFunction: `capture[grid](*args, **kwargs)` records the call."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple, dict]] = []

    def __getitem__(self, grid: Any) -> Any:
        return lambda *args, **kwargs: self.calls.append((args, kwargs))


def captured(launcher: Any, *args: Any, **kwargs: Any) -> tuple[tuple, dict]:
    """(args, kwargs) of the one kernel launch `launcher(*args, **kwargs, kernel=...)` makes,
    recorded by a `Capture` in place of its kernel (on "meta" tensors nothing runs)."""
    capture = Capture()
    launcher(*args, **kwargs, kernel=capture)
    return capture.calls[0]


def bind(fn: Any, arch: int, args: tuple, kwargs: dict) -> tuple[Specialization, dict]:
    """(specialization, options) of one launch of `fn` for GPUTarget("cuda", arch, 32), as
    Triton's own launcher binds it (`create_function_from_signature`, `JITFunction._pack_args`,
    triton/runtime/jit.py): what `fn[grid](*args, **kwargs)` compiles under. Tensors may be on
    "meta" (address 0: 16-byte aligned, as every CUDA allocation).

    Raises:
        RuntimeError: `fn` is no JITFunction: its module was imported under TRITON_INTERPRET=1
            (code generation then fails in this process; compile in one without it).
    """
    if not isinstance(fn, JITFunction):
        raise RuntimeError(
            "compile_for_target needs a process without TRITON_INTERPRET=1 "
            "(this module was imported under Triton's interpreter)"
        )
    backend = make_backend(GPUTarget("cuda", arch, 32))
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    bound, specialization, options = binder(*args, **kwargs)
    options, *packed = fn._pack_args(backend, kwargs, bound, specialization, options)
    return tuple(packed), options.__dict__


def compile_call(fn: Any, arch: int, args: tuple, kwargs: dict) -> CompiledKernel:
    """Compile the JITFunction `fn` for one launch's arguments (`bind`) for
    GPUTarget("cuda", arch, 32): the binary lands in Triton's cache under the key that launch
    looks up.

    Raises:
        triton.CompilationError: the compiler rejected the kernel.
    """
    specialization, options = bind(fn, arch, args, kwargs)
    source = ASTSource(fn, *specialization)
    return triton.compile(source, target=GPUTarget("cuda", arch, 32), options=dict(options))
