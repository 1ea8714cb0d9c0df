"""The dense family's kernel paired with another copy of it (the installed vLLM's
`_w8a8_triton_block_scaled_mm`), both compiled for one launch on a GPU target
(`tuner.kernels.fidelity`): what `tuner doctor` and the engine checks compare."""

from __future__ import annotations

import inspect
from typing import Any

from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.kernel import w8a8_block_fp8_matmul_kernel
from tuner.kernels.dense.target import DEFAULT_TORCH_DTYPE, launch_specialization
from tuner.kernels.fidelity import Compiled, compile_specialized


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
    signature, constexprs, attrs = launch_specialization(
        config, M, N, K, *block_shape, DEFAULT_TORCH_DTYPE
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
        compile_specialized(
            w8a8_block_fp8_matmul_kernel, signature, constexprs, attrs, arch, options
        ),
        compile_specialized(theirs, renamed, constexprs, attrs, arch, options),
    )
