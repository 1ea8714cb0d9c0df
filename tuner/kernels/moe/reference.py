"""Inputs and float64 references of the fused-MoE block-FP8 experts: each expert GEMM, and the
whole expert MLP (gate_up GEMM, SiLU-and-mul, activation re-quantization, down GEMM with the
routing weights, sum over the top_k experts)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from tuner.kernels.dense.reference import FP8_MAX, dequantize
from tuner.kernels.moe.align import route

# Weight scales are drawn uniform in [SCALE_LOW, SCALE_HIGH); see make_moe_inputs.
SCALE_LOW = 1e-2
SCALE_HIGH = 4e-2
# vLLM's per_token_group_quant_fp8 divides by max(amax, eps) / 448 with this eps.
GROUP_QUANT_EPS = 1e-10


@dataclass(frozen=True)
class MoeInputs:
    """One fused-MoE problem: M tokens, E experts of intermediate size N, hidden size K.

    Attributes:
        x: [M, K] float8_e4m3fn activations, quantized per 1 x group_k (`quantize_groups`).
        x_scale: [M, ceil(K / group_k)] float32.
        w1: [E, 2N, K] float8_e4m3fn gate and up projections (gate rows first, as vLLM's w13).
        w1_scale: [E, ceil(2N / group_n), ceil(K / group_k)] float32.
        w2: [E, K, N] float8_e4m3fn down projections.
        w2_scale: [E, ceil(K / group_n), ceil(N / group_k)] float32.
        topk_weights: [M, top_k] float32 routing weights, each row summing to 1.
        topk_ids: [M, top_k] int32 experts of each token, distinct per row.
    """

    x: torch.Tensor
    x_scale: torch.Tensor
    w1: torch.Tensor
    w1_scale: torch.Tensor
    w2: torch.Tensor
    w2_scale: torch.Tensor
    topk_weights: torch.Tensor
    topk_ids: torch.Tensor


def quantize_groups(values: torch.Tensor, group_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize each 1 x group_k group of a row to fp8 e4m3 with its own scale, computing in the
    precision of `values` (float32 for the kernel path, float64 for the reference).

    As vLLM 0.33.0's `per_token_group_quant_fp8` (fp8_utils.py): scale = max(amax, 1e-10) / 448,
    q = clamp(v / scale, -448, 448) cast to e4m3.

    Args:
        values: [R, C] float32 or float64.
        group_k: columns per group; the last group may be partial.

    Returns:
        (q [R, C] float8_e4m3fn, scales [R, ceil(C / group_k)] float32).
    """
    rows, cols = values.shape
    groups = math.ceil(cols / group_k)
    padded = torch.zeros(rows, groups * group_k, dtype=values.dtype, device=values.device)
    padded[:, :cols] = values
    grouped = padded.view(rows, groups, group_k)
    scales = grouped.abs().amax(dim=-1).clamp(min=GROUP_QUANT_EPS) / FP8_MAX
    q = (grouped / scales[..., None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q.view(rows, groups * group_k)[:, :cols].contiguous(), scales.float()


def make_moe_inputs(
    M: int,
    E: int,
    N: int,
    K: int,
    top_k: int,
    block_shape: tuple[int, int] = (128, 128),
    *,
    seed: int,
    device: str | torch.device = "cpu",
) -> MoeInputs:
    """Draw one fused-MoE problem, the same on every device.

    As vLLM's benchmark_moe.py (vLLM 0.33.0) draws it: activations and weights standard normal
    (weights cast to e4m3), routing from standard-normal gating logits [M, E] through softmax
    top-k with renormalization (`route`). The activations are quantized per 1 x group_k group
    here, once. Weight scales differ from the script's uniform [0, 0.01): uniform in
    [1e-2, 4e-2), away from zero, so that with K up to 7168 the gate_up outputs are O(1) and the
    down outputs stay far inside fp16's range and above its smallest normal (6.1e-5).

    Everything is drawn on the CPU from one torch.Generator seeded with `seed`, in the order x,
    logits, w1, w2, w1_scale, w2_scale, then moved to `device`.

    Raises:
        ValueError: a non-positive size, or top_k > E.
    """
    group_n, group_k = block_shape
    if min(M, E, N, K, top_k, group_n, group_k) < 1 or top_k > E:
        raise ValueError(
            f"bad MoE problem M={M} E={E} N={N} K={K} top_k={top_k} block_shape={list(block_shape)}"
        )
    generator = torch.Generator(device="cpu").manual_seed(seed)

    def normal(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator, dtype=torch.float32)

    def scales(rows: int, cols: int) -> torch.Tensor:
        unit = torch.rand(E, rows, cols, generator=generator, dtype=torch.float32)
        return SCALE_LOW + unit * (SCALE_HIGH - SCALE_LOW)

    x = normal(M, K)
    logits = normal(M, E)
    w1 = normal(E, 2 * N, K).to(torch.float8_e4m3fn)
    w2 = normal(E, K, N).to(torch.float8_e4m3fn)
    w1_scale = scales(math.ceil(2 * N / group_n), math.ceil(K / group_k))
    w2_scale = scales(math.ceil(K / group_n), math.ceil(N / group_k))
    x_q, x_scale = quantize_groups(x, group_k)
    topk_weights, topk_ids = route(logits, top_k)
    tensors = (x_q, x_scale, w1, w1_scale, w2, w2_scale, topk_weights, topk_ids)
    return MoeInputs(*(tensor.to(device) for tensor in tensors))


def reference_moe_gemm(
    a: torch.Tensor,
    a_scale: torch.Tensor,
    b: torch.Tensor,
    b_scale: torch.Tensor,
    topk_ids: torch.Tensor,
    top_k: int,
    block_shape: tuple[int, int],
    topk_weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """What one expert GEMM approximates, in float64: slot s = row * top_k + j of the flattened
    routing gets (a[s // top_k] * a_scale) @ (b[e] * b_scale[e])^T with e = topk_ids[s], times
    topk_weights[s] when given.

    Args:
        a: [T, K] fp8 rows, a_scale [T, ceil(K / group_k)].
        b: [E, N, K] fp8, b_scale [E, ceil(N / group_n), ceil(K / group_k)].
        topk_ids: T * top_k expert ids (any shape).
        top_k: slots per row of a.
        block_shape: [group_n, group_k].
        topk_weights: T * top_k weights, or None.

    Returns:
        [T * top_k, N] float64.
    """
    group_n, group_k = block_shape
    ids = topk_ids.reshape(-1).long()
    a64 = dequantize(a, a_scale, (1, group_k))
    out = torch.zeros(ids.numel(), b.shape[1], dtype=torch.float64, device=a.device)
    for expert in torch.unique(ids).tolist():
        slots = (ids == expert).nonzero().flatten()
        weight = dequantize(b[expert], b_scale[expert], (group_n, group_k))
        out[slots] = a64[slots // top_k] @ weight.T
    if topk_weights is not None:
        out = out * topk_weights.reshape(-1, 1).double()
    return out


def silu_and_mul(h: torch.Tensor) -> torch.Tensor:
    """vLLM's SiLU-and-mul on [T, 2N]: silu(h[:, :N]) * h[:, N:], in the precision of h."""
    half = h.shape[-1] // 2
    gate, up = h[:, :half], h[:, half:]
    return gate * torch.sigmoid(gate) * up


def _truncate_to_bf16(values: torch.Tensor) -> torch.Tensor:
    """float64 -> float32 (the kernel's accumulator) -> bfloat16 by dropping the low 16 bits
    (rounding toward zero), as Triton's interpreter stores fp32 into a bf16 tensor (numpy has no
    bf16); a GPU rounds to nearest. Returned as float64."""
    bits = values.float().contiguous().view(torch.int32) & -65536
    return bits.view(torch.float32).double()


def reference_expert_mlp(
    inputs: MoeInputs, block_shape: tuple[int, int], intermediate_dtype: torch.dtype | None = None
) -> torch.Tensor:
    """The whole expert MLP in float64, with the activation re-quantization the kernel path does:
    h = gate_up GEMM [M * top_k, 2N]; a = silu_and_mul(h) re-quantized to fp8 per 1 x group_k
    group (in float64); y = down GEMM of a times the routing weights [M * top_k, K]; out = the
    sum of y over each token's top_k slots.

    Args:
        inputs: the problem.
        block_shape: [group_n, group_k].
        intermediate_dtype: the dtype vLLM stores h and silu_and_mul(h) in (its caches have the
            activations' dtype, bf16 in serving); h and a are rounded to it as there, else the
            fp8 codes of the re-quantized activations differ in one step for a few percent of
            them (bf16 has 8 significant bits, e4m3 has 4) and the reference would carry about
            2% of error that no config can remove. None: no rounding. On the CPU (where only
            Triton's interpreter runs the kernel) h is rounded to bf16 as the interpreter does,
            toward zero (`_truncate_to_bf16`).

    Returns:
        [M, K] float64.
    """
    M, top_k = inputs.topk_ids.shape

    def stored(values: torch.Tensor) -> torch.Tensor:
        return values if intermediate_dtype is None else values.to(intermediate_dtype).double()

    h = reference_moe_gemm(
        inputs.x, inputs.x_scale, inputs.w1, inputs.w1_scale, inputs.topk_ids, top_k, block_shape
    )
    interpreted = h.device.type == "cpu" and intermediate_dtype == torch.bfloat16
    h = _truncate_to_bf16(h) if interpreted else stored(h)
    a, a_scale = quantize_groups(stored(silu_and_mul(h)), block_shape[1])
    y = reference_moe_gemm(
        a, a_scale, inputs.w2, inputs.w2_scale, inputs.topk_ids, 1, block_shape, inputs.topk_weights
    )
    return y.view(M, top_k, -1).sum(dim=1)
