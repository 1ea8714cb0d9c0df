"""The fused-MoE family's kernel paired with vLLM's `fused_moe_kernel`, each launched by its own
host code for both GEMMs of the expert MLP and compiled for a GPU target
(`tuner.kernels.fidelity`): what `tuner doctor` compares."""

from __future__ import annotations

import importlib
from typing import Any

import torch

from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.target import DEFAULT_TORCH_DTYPE
from tuner.kernels.fidelity import Capture, Compiled, compile_launch
from tuner.kernels.moe.kernel import fused_moe_fp8_block_kernel, invoke_moe_gemm
from tuner.kernels.moe.specialization import max_padded_slots, uses_naive_assignment, uses_swap_ab
from tuner.kernels.moe.vllm_workload import vllm_moe_gemm


def as_on(arch: int, kwargs: dict) -> dict:
    """vLLM's launch arguments as on a GPU of `arch`: vLLM 0.33.0 sets SWAP_AB from the GPU its
    host code sees (fused_moe/utils.py `enable_swap_ab`), which is none in a process without
    one; here it is set from `arch` (`uses_swap_ab`).

    Args:
        arch: compute capability as an int (89, 90, ...).
        kwargs: the keyword arguments vLLM's host code passed to its kernel.

    Returns:
        `kwargs`, with SWAP_AB as vLLM sets it on `arch` where the kernel takes it.
    """
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
    """Compile the builtin fused-MoE kernel and vLLM's (`module`.`function` of
    `tuner.kernels.moe.family.VLLM_MOE`, launched by that module's `dispatch_fused_moe_kernel`)
    for both GEMMs of the expert MLP at M tokens (E experts, N the per-rank intermediate size, K
    the hidden size), each with the arguments its own host code passes on a GPU of `arch`
    (captured on "meta" tensors: nothing runs), with the routing vLLM uses at M.

    Returns:
        [(builtin's, vLLM's)] for the gate_up GEMM (B [E, 2N, K]) and the down GEMM (B [E, K, N]).

    Raises:
        ImportError, AttributeError: no such vLLM module or kernel.
        triton.CompilationError: either kernel does not compile.
    """
    vllm = importlib.import_module(module)
    routing = _meta_routing(M, top_k, E, config.BLOCK_SIZE_M)
    pairs = []
    for rows, n, k, launch_top_k, weighted in (
        (M, 2 * N, K, top_k, False),
        (M * top_k, K, N, 1, True),
    ):
        operands = _meta_operands(
            rows * launch_top_k, rows, n, k, E=E, M=M, top_k=top_k, block_shape=block_shape
        )
        launch = {
            "mul_routed_weight": weighted,
            "top_k": launch_top_k,
            "config": config.as_dict(),
            "block_shape": block_shape,
        }
        ours, theirs = _captured(vllm, function, (*operands, *routing), launch, arch, module)
        pairs.append(
            (
                compile_launch(fused_moe_fp8_block_kernel, arch, *ours),
                compile_launch(getattr(vllm, function), arch, theirs[0], as_on(arch, theirs[1])),
            )
        )
    return pairs


def _captured(vllm: Any, function: str, tensors: tuple, launch: dict, arch: int, module: str):
    """((args, kwargs) our host code, (args, kwargs) vLLM's passes to its kernel for one
    launch: each launched on `tensors` with vLLM's kernel swapped for a `Capture` meanwhile."""
    ours, theirs, kernel = Capture(), Capture(), getattr(vllm, function)
    invoke_moe_gemm(*tensors, **launch, arch=arch, kernel=ours)
    setattr(vllm, function, theirs)
    try:
        vllm_moe_gemm(*tensors, **launch, module=module)
    finally:
        setattr(vllm, function, kernel)
    return ours.calls[0], theirs.calls[0]


def _meta_routing(M: int, top_k: int, E: int, block_m: int) -> tuple:
    """The routing tensors (sorted token ids, expert ids, number of post-padded tokens) on
    "meta" as vLLM routes M tokens: naive assignment for small batches (no sorted ids,
    `uses_naive_assignment`), else padded to `block_m` per expert (`max_padded_slots`)."""
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
    meta, fp8, (gn, gk) = "meta", torch.float8_e4m3fn, block_shape
    return (
        torch.empty(rows, k, dtype=fp8, device=meta),
        torch.empty(rows, -(-k // gk), device=meta),
        torch.empty(E, n, k, dtype=fp8, device=meta),
        torch.empty(E, -(-n // gn), -(-k // gk), device=meta),
        torch.empty(out_rows, n, dtype=DEFAULT_TORCH_DTYPE, device=meta),
        torch.empty(M, top_k, device=meta),
    )
