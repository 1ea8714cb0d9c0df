"""The dense family's vLLM source: the installed vLLM's `_w8a8_triton_block_scaled_mm` launched
with the arguments vLLM's `w8a8_triton_block_scaled_mm` passes it (vLLM 0.33.0,
vllm/model_executor/layers/quantization/utils/fp8_utils.py: the grid of cdiv(M, BLOCK_SIZE_M) *
cdiv(N, BLOCK_SIZE_N) programs, strides of A, B read transposed, C, As and Bs read transposed,
then the config's six keys as keywords), with the config being tuned instead of the one vLLM's
file lookup would pick. Imports vLLM when first launched."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import torch
import triton

from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.workload import DenseWorkload
from tuner.kernels.interpreter import fix_interpreter_index
from tuner.kernels.shape import Shape


def vllm_kernel(module: str, function: str) -> Any:
    """A Triton kernel (a JITFunction) of the installed vLLM, e.g. `tuner.kernels.dense.family
    .VLLM_DENSE`'s module and function.

    Raises:
        ImportError: vLLM or the module cannot be imported.
        AttributeError: the module has no such kernel.
    """
    return getattr(importlib.import_module(module), function)


@dataclass(frozen=True)
class VllmDenseWorkload(DenseWorkload):
    """A dense problem (`DenseWorkload`) whose launch runs vLLM's installed kernel.

    Attributes:
        kernel: vLLM's `_w8a8_triton_block_scaled_mm` (`vllm_kernel`).
    """

    kernel: Any = None

    @classmethod
    def from_vllm(
        cls, shape: Shape, M: int, *, seed: int, device: str, module: str, function: str
    ) -> VllmDenseWorkload:
        """Draw the inputs of (shape, M) as the builtin workload does (same seed, same data)
        and import vLLM's kernel `function` from `module`."""
        base = DenseWorkload.make(shape, M, seed=seed, device=device)
        return cls(base.inputs, base.block_shape, vllm_kernel(module, function))

    def launch(
        self,
        config: KernelConfig,
        weights: tuple[torch.Tensor, torch.Tensor],
        *,
        out: torch.Tensor | None,
        out_dtype: torch.dtype,
    ) -> torch.Tensor:
        """One launch of vLLM's kernel reading the weight copy `weights` = (B, Bs), argument for
        argument as `w8a8_triton_block_scaled_mm` launches it.

        Raises:
            ValueError: `out` is not a contiguous [M, N] tensor of out_dtype.
        """
        A, As = self.inputs.A, self.inputs.As
        B, Bs = weights
        block_n, block_k = self.block_shape
        M = A.numel() // A.shape[-1]
        N, K = B.shape
        if out is None:
            out = A.new_empty(A.shape[:-1] + (N,), dtype=out_dtype)
        elif tuple(out.shape) != (M, N) or out.dtype != out_dtype or not out.is_contiguous():
            raise ValueError(f"out must be a contiguous [{M}, {N}] {out_dtype} tensor")
        meta = config.as_dict()
        grid = (triton.cdiv(M, meta["BLOCK_SIZE_M"]) * triton.cdiv(N, meta["BLOCK_SIZE_N"]),)
        C = out
        fix_interpreter_index()  # Triton < 3.8's interpreter under numpy >= 2.4 only
        self.kernel[grid](
            A,
            B,
            C,
            As,
            Bs,
            M,
            N,
            K,
            block_n,
            block_k,
            A.stride(-2),
            A.stride(-1),
            B.stride(1),
            B.stride(0),
            C.stride(-2),
            C.stride(-1),
            As.stride(-2),
            As.stride(-1),
            Bs.stride(1),
            Bs.stride(0),
            **meta,
        )
        return C
