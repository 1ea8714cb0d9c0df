"""One fused-MoE problem on a device: its tensors, its float64 reference and one launch of the
expert MLP with one config (the `tuner.kernels.family.Workload` of the moe family)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch

from tuner.kernels.config import KernelConfig
from tuner.kernels.moe.align import moe_align_block_size, naive_assignment
from tuner.kernels.moe.kernel import OUT_DTYPES, invoke_moe_gemm, parse_config
from tuner.kernels.moe.reference import (
    MoeInputs,
    make_moe_inputs,
    quantize_groups,
    reference_expert_mlp,
    silu_and_mul,
)
from tuner.kernels.moe.specialization import uses_naive_assignment
from tuner.kernels.shape import Shape

# (sorted_token_ids or None for naive assignment, expert_ids, num_tokens_post_padded)
Alignment = tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]


def fused_experts(
    inputs: MoeInputs,
    weights: tuple[torch.Tensor, ...],
    config: Mapping[str, object],
    alignment: Alignment,
    *,
    block_shape: tuple[int, int],
    out: torch.Tensor | None,
    out_dtype: torch.dtype,
    gemm: Callable[..., torch.Tensor] = invoke_moe_gemm,
) -> torch.Tensor:
    """The expert MLP after routing, as vLLM 0.33.0's `fused_experts_impl` runs it with one
    config for both GEMMs: gate_up GEMM into [M * top_k, 2N], SiLU-and-mul (float32 math, stored
    in out_dtype), re-quantization per 1 x group_k group, down GEMM with the routing weights into
    [M, top_k, K], then the sum over top_k into out.

    Args:
        inputs: the quantized activations and the routing (`make_moe_inputs`).
        weights: (w1 [E, 2N, K], w1_scale, w2 [E, K, N], w2_scale), one copy of the weights.
        config: vLLM's keys.
        alignment: `moe_align_block_size(topk_ids, config's BLOCK_SIZE_M, E)`, or
            `naive_assignment` where vLLM assigns one slot per program.
        block_shape: [group_n, group_k].
        out: [M, K] of out_dtype to write, or None to allocate.
        out_dtype: torch.bfloat16 or torch.float16.
        gemm: one expert GEMM, called as `invoke_moe_gemm` (the builtin kernel's launcher, or
            `tuner.kernels.moe.vllm_workload.vllm_moe_gemm` for vLLM's kernel).

    Returns:
        [M, K] out_dtype.

    Raises:
        ValueError: bad config, dtype or shapes.
    """
    if out_dtype not in OUT_DTYPES:
        raise ValueError(f"out_dtype must be torch.bfloat16 or torch.float16, got {out_dtype}")
    w1, w1_scale, w2, w2_scale = weights
    M, top_k = inputs.topk_ids.shape
    K = inputs.x.shape[1]
    N = w2.shape[2]
    device = inputs.x.device
    if out is None:
        out = torch.empty(M, K, dtype=out_dtype, device=device)
    elif tuple(out.shape) != (M, K) or out.dtype != out_dtype or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous [{M}, {K}] {out_dtype} tensor")
    sorted_ids, expert_ids, padded = alignment
    gate_up = torch.empty(M * top_k, 2 * N, dtype=out_dtype, device=device)
    gemm(
        inputs.x,
        inputs.x_scale,
        w1,
        w1_scale,
        gate_up,
        inputs.topk_weights,
        sorted_ids,
        expert_ids,
        padded,
        mul_routed_weight=False,
        top_k=top_k,
        config=config,
        block_shape=block_shape,
    )
    act = silu_and_mul(gate_up.float()).to(out_dtype)
    act_q, act_scale = quantize_groups(act.float(), block_shape[1])
    down = torch.empty(M, top_k, K, dtype=out_dtype, device=device)
    gemm(
        act_q,
        act_scale,
        w2,
        w2_scale,
        down,
        inputs.topk_weights,
        sorted_ids,
        expert_ids,
        padded,
        mul_routed_weight=True,
        top_k=1,
        config=config,
        block_shape=block_shape,
    )
    return torch.sum(down, dim=1, out=out)


@dataclass
class MoeWorkload:
    """The expert MLP of one MoE layer at M tokens (`make_moe_inputs`).

    What a trial times, against vLLM's benchmark_moe.py (vLLM 0.33.0), which times
    `fused_topk` + `fused_experts` for one config over both GEMMs: here both GEMMs with one
    config, the SiLU-and-mul, the re-quantization of the intermediate activations and the sum
    over top_k are timed; the routing (top-k of the gating logits), `moe_align_block_size` (done
    once per BLOCK_SIZE_M and kept) and the quantization of the input activations (done once)
    are not. Those three do not depend on the config except the alignment on BLOCK_SIZE_M,
    and vLLM runs them as separate CUDA kernels whose cost our torch versions would not match.
    Routing is drawn once per problem from seeded standard-normal logits (the script redraws
    them for each of its timed iterations).
    """

    inputs: MoeInputs
    block_shape: tuple[int, int]
    num_experts: int
    _alignments: dict[int, Alignment] = field(default_factory=dict)
    # One expert GEMM as `invoke_moe_gemm` takes it; a vLLM source's workload replaces it.
    gemm: Callable[..., torch.Tensor] = invoke_moe_gemm

    @classmethod
    def make(cls, shape: Shape, M: int, *, seed: int, device: str) -> MoeWorkload:
        """Draw the problem of (shape, M): shape.N is the per-rank intermediate size, shape.K
        the hidden size, shape.params hold E and top_k.

        Raises:
            KeyError: shape.params lack E or top_k.
            ValueError: the shape has no block shape (`Shape.block_pair`).
        """
        E, top_k = shape.param("E"), shape.param("top_k")
        block_shape = shape.block_pair("moe")
        inputs = make_moe_inputs(
            M, E, shape.N, shape.K, top_k, block_shape, seed=seed, device=device
        )
        return cls(inputs, block_shape, E)

    @property
    def out_shape(self) -> tuple[int, int]:
        """[M, K] of the layer's output."""
        M, K = self.inputs.x.shape
        return (M, K)

    def weights(self) -> tuple[torch.Tensor, ...]:
        """(w1, w1_scale, w2, w2_scale): what a launch reads that serving does not keep in L2."""
        i = self.inputs
        return (i.w1, i.w1_scale, i.w2, i.w2_scale)

    def reference(self, out_dtype: torch.dtype | None = None) -> torch.Tensor:
        """[M, K] float64 (`reference_expert_mlp`), the intermediates rounded to out_dtype as
        the launch stores them."""
        return reference_expert_mlp(self.inputs, self.block_shape, out_dtype)

    def alignment(self, block_size_m: int) -> Alignment:
        """The routing for one BLOCK_SIZE_M as vLLM hands it to the expert GEMMs at this batch
        size, computed once: `naive_assignment` where `uses_naive_assignment` says vLLM takes
        that path, else `moe_align_block_size`."""
        if block_size_m not in self._alignments:
            topk_ids = self.inputs.topk_ids
            M, top_k = topk_ids.shape
            if uses_naive_assignment(M, top_k, self.num_experts):
                self._alignments[block_size_m] = naive_assignment(topk_ids, block_size_m)
            else:
                self._alignments[block_size_m] = moe_align_block_size(
                    topk_ids, block_size_m, self.num_experts
                )
        return self._alignments[block_size_m]

    def launch(
        self,
        config: KernelConfig,
        weights: tuple[torch.Tensor, ...],
        *,
        out: torch.Tensor | None,
        out_dtype: torch.dtype,
    ) -> torch.Tensor:
        """One run of `fused_experts` reading the weight copy `weights`."""
        parsed = parse_config(config.as_dict(), self.block_shape)
        return fused_experts(
            self.inputs,
            weights,
            parsed.as_dict(),
            self.alignment(parsed.BLOCK_SIZE_M),
            block_shape=self.block_shape,
            out=out,
            out_dtype=out_dtype,
            gemm=self.gemm,
        )
