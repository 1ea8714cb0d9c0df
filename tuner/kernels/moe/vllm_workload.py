"""The fused-MoE family's vLLM source: each expert GEMM through the installed vLLM's
`dispatch_fused_moe_kernel`, called as vLLM 0.33.0's `fused_experts_impl` calls it on the
fp8_w8a8 block path (vllm/model_executor/layers/fused_moe/fused_moe.py: C as [rows, top_k, N],
topk_weights [M, top_k], no zero points or bias, compute_type the output's Triton dtype), which
launches vLLM's `fused_moe_kernel` through `invoke_fused_moe_triton_kernel` (its EM cut,
SPLIT_K = 1, BLOCK_SIZE_K cap and, on sm90, SWAP_AB included), with the routing the builtin
workload computes as vLLM does at M (`MoeWorkload.alignment`: naive assignment for small
batches, `moe_align_block_size` otherwise). Imports vLLM when first launched.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial

import torch

from tuner.kernels.interpreter import fix_interpreter_index
from tuner.kernels.moe.workload import MoeWorkload
from tuner.kernels.shape import Shape


def vllm_moe_gemm(
    A: torch.Tensor,
    A_scale: torch.Tensor,
    B: torch.Tensor,
    B_scale: torch.Tensor,
    C: torch.Tensor,
    topk_weights: torch.Tensor | None,
    sorted_token_ids: torch.Tensor,
    expert_ids: torch.Tensor,
    num_tokens_post_padded: torch.Tensor,
    *,
    mul_routed_weight: bool,
    top_k: int,
    config: Mapping[str, object],
    block_shape: tuple[int, int] = (128, 128),
    module: str,
) -> torch.Tensor:
    """One expert GEMM by vLLM's kernel, taking `tuner.kernels.moe.kernel.invoke_moe_gemm`'s
    arguments (shapes there) and passing them as vLLM's `fused_experts_impl` does.

    C may be [rows * top_k, N] or [rows, top_k, N]; it is viewed as [rows * top_k, 1, N],
    whose strides equal vLLM's [rows, top_k, N] cache's. `module` is vLLM's fused_moe module
    (`tuner.kernels.moe.family.VLLM_MOE`).

    Returns:
        C.
    """
    import triton.language as tl

    compute_type = tl.bfloat16 if C.dtype == torch.bfloat16 else tl.float16
    fix_interpreter_index()  # Triton < 3.8's interpreter under numpy >= 2.4 only
    importlib.import_module(module).dispatch_fused_moe_kernel(
        A,
        B,
        C.view(-1, 1, C.shape[-1]),
        A_scale,
        B_scale,
        None,
        topk_weights,
        sorted_token_ids,
        expert_ids,
        num_tokens_post_padded,
        mul_routed_weight,
        top_k,
        dict(config),
        compute_type=compute_type,
        use_fp8_w8a8=True,
        use_int8_w8a8=False,
        use_int8_w8a16=False,
        use_int4_w4a16=False,
        per_channel_quant=False,
        block_shape=list(block_shape),
        B_bias=None,
    )
    return C


@dataclass
class VllmMoeWorkload(MoeWorkload):
    """An MoE problem (`MoeWorkload`) whose expert GEMMs run vLLM's installed kernel."""

    @classmethod
    def from_vllm(
        cls, shape: Shape, M: int, *, seed: int, device: str, module: str
    ) -> VllmMoeWorkload:
        """Draw the problem as the builtin workload does (same seed, same data); its GEMMs
        call `module`'s dispatcher (imported here, so a missing vLLM fails at once)."""
        importlib.import_module(module)
        base = MoeWorkload.make(shape, M, seed=seed, device=device)
        return cls(
            base.inputs,
            base.block_shape,
            base.num_experts,
            gemm=partial(vllm_moe_gemm, module=module),
        )
