"""Compile the dense block-FP8 kernel for a GPU architecture without a GPU, specialized exactly
as Triton's launcher specializes a launch (so the binary lands under the launch's cache key)."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, CompiledKernel
from triton.runtime.jit import JITFunction

from tuner.core import DEFAULT_OUT_DTYPE
from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.kernel import (
    OUT_DTYPES,
    _check_block_shape,
    _check_config,
    w8a8_block_fp8_matmul_kernel,
)
from tuner.kernels.interpreter import triton_version

# Triton's names of the pointer arguments' element types.
POINTER_TYPES = {torch.bfloat16: "*bf16", torch.float16: "*fp16"}
# The output dtype compiled for when none is asked (`tuner.core.DEFAULT_OUT_DTYPE`, serving's).
DEFAULT_TORCH_DTYPE: torch.dtype = getattr(torch, DEFAULT_OUT_DTYPE)
_DIVISIBLE_BY_16 = [["tt.divisibility", 16]]

Specialization = tuple[
    dict[str, str], dict[tuple[int, ...], Any], dict[tuple[int, ...], list[list[object]]]
]


def compile_specialized(
    fn: Any, specialization: Specialization, arch: int, config: KernelConfig
) -> CompiledKernel:
    """Compile the JITFunction `fn` with a launch's (signature, constexprs, attrs) and the
    config's warps and stages for GPUTarget("cuda", arch, 32); the binary lands in Triton's
    cache under the key that launch computes.

    Raises:
        RuntimeError: `fn` is no JITFunction: its module was imported under TRITON_INTERPRET=1
            (once the interpreter has run, triton.language stays patched in the process and
            code generation fails, so compile in a process without it).
        triton.CompilationError: the compiler rejected the kernel.
    """
    if not isinstance(fn, JITFunction):
        raise RuntimeError(
            "compile_for_target needs a process without TRITON_INTERPRET=1 "
            "(this module was imported under Triton's interpreter)"
        )
    options = {"num_warps": config.num_warps, "num_stages": config.num_stages}
    source = ASTSource(fn, *specialization)
    return triton.compile(source, target=GPUTarget("cuda", arch, 32), options=options)


def argument_specialization(
    kernel_fn,
    pointers: Mapping[str, str],
    ints: Mapping[str, int],
    meta: Mapping[str, Any],
) -> tuple[dict[str, str], dict[tuple[int, ...], Any], dict[tuple[int, ...], list]]:
    """How Triton's launcher specializes a kernel's arguments, for `triton.compile`.

    Pointers get their type and are taken as 16-byte aligned; a constexpr (a `meta` entry) or
    an integer equal to 1 becomes a constant; any other integer is i32 (i64 past int32) and
    gets the divisibility-by-16 attribute when it is a multiple of 16 (constexprs get no
    attribute entry at all on Triton before 3.8).

    Args:
        kernel_fn: the @triton.jit kernel's Python function (its parameters, in order).
        pointers: argument name -> Triton pointer type, e.g. "*fp8e4nv".
        ints: integer argument name -> its value at the launch.
        meta: constexpr argument name -> its value.

    Returns:
        (signature, constexprs, attrs) keyed as `triton.compiler.ASTSource` takes them.
    """
    signature: dict[str, str] = {}
    constexprs: dict[tuple[int, ...], Any] = {}
    attrs: dict[tuple[int, ...], list] = {}
    # The attributes enter the compile cache key (`ASTSource.hash`), so they must be the
    # launcher's exactly: Triton 3.6's `JITFunction._pack_args` leaves constexprs out, 3.8 and
    # 3.9 list them with no attribute (3.7 is not verified and is taken as 3.6).
    constexpr_attrs = triton_version() >= (3, 8)
    for index, name in enumerate(inspect.signature(kernel_fn).parameters):
        path = (index,)
        attrs[path] = []
        if name in pointers:
            signature[name] = pointers[name]
            attrs[path] = _DIVISIBLE_BY_16
        elif name in meta or ints[name] == 1:
            signature[name] = "constexpr"
            constexprs[path] = meta[name] if name in meta else 1
            if not constexpr_attrs:
                del attrs[path]
        else:
            value = ints[name]
            signature[name] = "i32" if -(2**31) <= value < 2**31 else "i64"
            if value % 16 == 0:
                attrs[path] = _DIVISIBLE_BY_16
    return signature, constexprs, attrs


def launch_specialization(
    config: KernelConfig,
    M: int,
    N: int,
    K: int,
    group_n: int,
    group_k: int,
    out_dtype: torch.dtype,
) -> Specialization:
    """(signature, constexprs, attrs) of the launch for contiguous, 16-byte aligned tensors.

    Mirrors Triton 3.x's launcher (`native_specialize_impl`, `JITFunction._pack_args`): an int
    equal to 1 becomes a constant, an int divisible by 16 gets `tt.divisibility` 16, pointers are
    taken as 16-byte aligned; every other argument gets no attribute (`argument_specialization`).
    So M = 1, M % 16 == 0 and other M compile to different binaries, as on the GPU.
    """
    k_groups = triton.cdiv(K, group_k)
    # Scalar arguments with the strides of contiguous tensors (B and Bs are read transposed).
    ints = {
        "M": M,
        "N": N,
        "K": K,
        "group_n": group_n,
        "group_k": group_k,
        "stride_am": K,
        "stride_ak": 1,
        "stride_bk": 1,
        "stride_bn": K,
        "stride_cm": N,
        "stride_cn": 1,
        "stride_as_m": k_groups,
        "stride_as_k": 1,
        "stride_bs_k": 1,
        "stride_bs_n": k_groups,
    }
    pointers = {
        "a_ptr": "*fp8e4nv",
        "b_ptr": "*fp8e4nv",
        "c_ptr": POINTER_TYPES[out_dtype],
        "a_s_ptr": "*fp32",
        "b_s_ptr": "*fp32",
    }
    meta = {
        "BLOCK_SIZE_M": config.BLOCK_SIZE_M,
        "BLOCK_SIZE_N": config.BLOCK_SIZE_N,
        "BLOCK_SIZE_K": config.BLOCK_SIZE_K,
        "GROUP_SIZE_M": config.GROUP_SIZE_M,
    }
    return argument_specialization(w8a8_block_fp8_matmul_kernel.fn, pointers, ints, meta)


def compile_for_target(
    config: Mapping[str, int],
    arch: int,
    *,
    M: int,
    N: int,
    K: int,
    block_shape: tuple[int, int] | list[int] = (128, 128),
    out_dtype: torch.dtype = DEFAULT_TORCH_DTYPE,
) -> CompiledKernel:
    """Compile the kernel for an NVIDIA architecture without a GPU, specialized as a launch is.

    Needs no GPU: Triton's wheel carries ptxas. The result lands in Triton's cache under the key a
    launch of the same config and specialization computes, so a later launch need not compile.

    Args:
        config: vLLM's six keys (see w8a8_block_fp8_matmul).
        arch: compute capability as an int: 89 (Ada), 90 (Hopper), 100, 120 (Blackwell).
        M: rows of A (tokens).
        N: rows of B.
        K: the reduction dimension.
        block_shape: [group_n, group_k] of the weight scales.
        out_dtype: torch.bfloat16 or torch.float16.

    Returns:
        Triton's CompiledKernel: `.metadata.shared` is the shared memory per program in bytes,
        `.asm` holds ttir, ttgir, llir, ptx and cubin.

    Raises:
        ValueError: bad config, block_shape, out_dtype or dimensions.
        RuntimeError: this module was imported under TRITON_INTERPRET=1.
        triton.CompilationError: the compiler rejected the kernel.
    """
    group_n, group_k = _check_block_shape(block_shape)
    parsed = _check_config(config, (group_n, group_k))
    if out_dtype not in OUT_DTYPES:
        raise ValueError(f"out_dtype must be torch.bfloat16 or torch.float16, got {out_dtype}")
    if M <= 0 or N <= 0 or K <= 0:
        raise ValueError(f"M, N, K must be positive, got M={M} N={N} K={K}")
    specialization = launch_specialization(parsed, M, N, K, group_n, group_k, out_dtype)
    return compile_specialized(w8a8_block_fp8_matmul_kernel, specialization, arch, parsed)
