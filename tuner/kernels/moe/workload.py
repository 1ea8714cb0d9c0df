"""One fused-MoE problem on a device (the moe family's `Workload`): its inputs and routing drawn
as vLLM's benchmark_moe.py draws them, vLLM's `moe_align_block_size` and naive assignment in
torch, the float64 references, one run of the expert MLP by the builtin kernel or the installed
vLLM's, and the kernel compiled for a GPU target (as a launch specializes it, or beside vLLM's)."""

from __future__ import annotations

import dataclasses
import importlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
import triton.language as tl

from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.workload import FP8_MAX, dequantize
from tuner.kernels.interpreter import fix_interpreter_index
from tuner.kernels.moe.family import VLLM_MOE
from tuner.kernels.moe.kernel import fused_moe_fp8_block_kernel, invoke_moe_gemm
from tuner.kernels.moe.space import (
    max_padded_slots,
    uses_naive_assignment,
)
from tuner.kernels.shape import Shape
from tuner.kernels.target import (
    DEFAULT_TORCH_DTYPE,
    captured,
    compile_call,
)

# Weight scales are drawn uniform in [SCALE_LOW, SCALE_HIGH); see MoeWorkload.make.
SCALE_LOW = 1e-2
SCALE_HIGH = 4e-2
# vLLM's per_token_group_quant_fp8 divides by max(amax, eps) / 448 with this eps.
GROUP_QUANT_EPS = 1e-10
# (sorted_token_ids or None for naive assignment, expert_ids, num_tokens_post_padded)
Alignment = tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]


def route(logits: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k routing as vLLM's `fused_topk` with renormalize=True (what benchmark_moe.py runs):
    softmax over the experts of [M, E] logits, the top_k largest, weights renormalized.

    Returns:
        (topk_weights [M, top_k] float32, topk_ids [M, top_k] int32).
    """
    weights, ids = torch.topk(torch.softmax(logits.float(), dim=-1), top_k, dim=-1)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights.float().contiguous(), ids.to(torch.int32).contiguous()


def moe_align_block_size(
    topk_ids: torch.Tensor, block_size: int, num_experts: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The routed slots grouped by expert, each expert's run padded to a multiple of block_size:
    the outputs of vLLM 0.33.0's `moe_align_block_size` (its torch golden model in
    tests/kernels/moe). Slot s = token * top_k + j of the flattened [M, top_k] topk_ids keeps its
    order within an expert; padding holds numel, which the kernel masks; an expert with no slot
    gets no block.

    Returns:
        sorted_token_ids [max_padded_slots] int32, expert_ids [cdiv(max_padded_slots,
        block_size)] int32 (0 past the blocks in use), num_tokens_post_padded [1] int32.
    """
    device = topk_ids.device
    flat = topk_ids.reshape(-1).to(torch.int64)
    numel = flat.numel()
    total = max_padded_slots(numel, num_experts, block_size)
    sorted_token_ids = torch.full((total,), numel, dtype=torch.int32, device=device)
    expert_ids = torch.zeros((-(-total // block_size),), dtype=torch.int32, device=device)
    counts = torch.bincount(flat, minlength=num_experts)
    padded = (counts + block_size - 1) // block_size * block_size
    starts = torch.cumsum(padded, 0) - padded  # where each expert's run begins
    order = torch.sort(flat, stable=True).indices  # slots grouped by expert, in slot order
    experts_sorted = flat[order]
    rank = torch.arange(numel, device=device) - (torch.cumsum(counts, 0) - counts)[experts_sorted]
    sorted_token_ids[starts[experts_sorted] + rank] = order.to(torch.int32)
    blocks = padded // block_size
    used = int(blocks.sum())
    experts = torch.arange(num_experts, device=device, dtype=torch.int32)
    expert_ids[:used] = torch.repeat_interleave(experts, blocks)
    num_tokens_post_padded = torch.tensor([used * block_size], dtype=torch.int32, device=device)
    return sorted_token_ids, expert_ids, num_tokens_post_padded


def quantize_groups(values: torch.Tensor, group_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each 1 x group_k group of [R, C] values quantized to e4m3 with its own scale, in the
    precision of `values`, as vLLM 0.33.0's `per_token_group_quant_fp8` (fp8_utils.py): scale =
    max(amax, 1e-10) / 448, q = clamp(v / scale, -448, 448).

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
    """What one expert GEMM approximates, [T * top_k, N] float64: slot s = row * top_k + j gets
    (a[s // top_k] * a_scale) @ (b[e] * b_scale[e])^T with e = topk_ids[s] (a [T, K], b
    [E, N, K] fp8 with block scales), times topk_weights[s] when given."""
    group_n, group_k = block_shape
    ids = topk_ids.reshape(-1).long()
    a64 = dequantize(a, a_scale, (1, group_k))
    out = torch.zeros(ids.numel(), b.shape[1], dtype=torch.float64, device=a.device)
    for expert in torch.unique(ids).tolist():
        slots = (ids == expert).nonzero().flatten()
        out[slots] = a64[slots // top_k] @ dequantize(b[expert], b_scale[expert], block_shape).T
    if topk_weights is not None:
        out = out * topk_weights.reshape(-1, 1).double()
    return out


def silu_and_mul(h: torch.Tensor) -> torch.Tensor:
    """vLLM's SiLU-and-mul on [T, 2N]: silu(h[:, :N]) * h[:, N:], in the precision of h."""
    gate, up = h.chunk(2, dim=-1)
    return gate * torch.sigmoid(gate) * up


def _truncate_to_bf16(values: torch.Tensor) -> torch.Tensor:
    """float64 -> float32 (the kernel's accumulator) -> bfloat16 by dropping the low 16 bits
    (toward zero), as Triton's interpreter stores fp32 into bf16 (a GPU rounds to nearest);
    returned as float64."""
    return (values.float().contiguous().view(torch.int32) & -65536).view(torch.float32).double()


def vllm_moe_gemm(
    *operands: Any,
    mul_routed_weight: bool,
    top_k: int,
    config: Mapping[str, object],
    block_shape: tuple[int, int] = (128, 128),
    module: str,
) -> torch.Tensor:
    """One expert GEMM by the installed vLLM's kernel, taking `invoke_moe_gemm`'s arguments (the
    nine `operands`: A, A_scale, B, B_scale, C, topk_weights, sorted_token_ids, expert_ids,
    num_tokens_post_padded) and passing them to `dispatch_fused_moe_kernel` as vLLM 0.33.0's
    `fused_experts_impl` does on the fp8_w8a8 block path (C viewed as [rows * top_k, 1, N],
    whose strides equal vLLM's [rows, top_k, N] cache's; no zero points, B_bias left at its
    default None; compute_type
    C's Triton dtype). `module`: vLLM's fused_moe module (`tuner.kernels.moe.family.VLLM_MOE`'s).
    Returns C."""
    A, A_scale, B, B_scale, C, *routing = operands
    compute_type = tl.bfloat16 if C.dtype == torch.bfloat16 else tl.float16
    fix_interpreter_index()  # Triton < 3.8's interpreter under numpy >= 2.4 only
    importlib.import_module(module).dispatch_fused_moe_kernel(
        A,
        B,
        C.view(-1, 1, C.shape[-1]),
        A_scale,
        B_scale,
        None,
        *routing,
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
    )
    return C


@dataclass
class MoeWorkload:
    """The expert MLP of one MoE layer: M tokens, E experts of intermediate size N, hidden size
    K (`make` draws it).

    Timed, against vLLM 0.33.0's benchmark_moe.py (which times `fused_topk` + `fused_experts`):
    both GEMMs with one config, the SiLU-and-mul, the re-quantization and the sum over top_k.
    Not timed: the routing, `moe_align_block_size` (once per BLOCK_SIZE_M, kept) and the input
    quantization (once); they do not depend on the config (but the alignment on BLOCK_SIZE_M),
    and vLLM runs them as CUDA kernels our torch versions would not match. Routing is drawn once
    per problem (the script redraws it per timed iteration).

    Attributes:
        x: [M, K] float8_e4m3fn activations, quantized per 1 x group_k (`quantize_groups`).
        x_scale: [M, ceil(K / group_k)] float32.
        w1: [E, 2N, K] float8_e4m3fn gate and up projections (gate rows first, as vLLM's w13).
        w1_scale: [E, ceil(2N / group_n), ceil(K / group_k)] float32.
        w2: [E, K, N] float8_e4m3fn down projections.
        w2_scale: [E, ceil(K / group_n), ceil(N / group_k)] float32.
        topk_weights: [M, top_k] float32 routing weights, each row summing to 1.
        topk_ids: [M, top_k] int32 experts of each token, distinct per row.
        block_shape: [group_n, group_k].
        gemm: one expert GEMM as `invoke_moe_gemm` takes it; a vLLM source's workload
            replaces it.
    """

    x: torch.Tensor
    x_scale: torch.Tensor
    w1: torch.Tensor
    w1_scale: torch.Tensor
    w2: torch.Tensor
    w2_scale: torch.Tensor
    topk_weights: torch.Tensor
    topk_ids: torch.Tensor
    block_shape: tuple[int, int]
    gemm: Callable[..., torch.Tensor] = invoke_moe_gemm
    _alignments: dict[int, Alignment] = field(default_factory=dict)

    @classmethod
    def make(cls, shape: Shape, M: int, *, seed: int, device: str) -> MoeWorkload:
        """The problem of (shape, M) (N the per-rank intermediate size, K the hidden size, params
        E and top_k), the same on every device: drawn on the CPU from one generator seeded with
        `seed`, in the order x, logits, w1, w2, w1_scale, w2_scale, then moved.

        As vLLM 0.33.0's benchmark_moe.py draws it: activations and weights standard normal
        (weights cast to e4m3), routing from standard-normal logits [M, E] (`route`); the
        activations are quantized per 1 x group_k once. Weight scales uniform in [1e-2, 4e-2),
        not the script's [0, 0.01): away from zero, so that with K up to 7168 the outputs stay
        far inside fp16's range and above its smallest normal.

        Raises:
            KeyError: shape.params lack E or top_k.
            ValueError: the shape has no block shape (`Shape.block_pair`).
        """
        E, top_k, block_shape = shape.param("E"), shape.param("top_k"), shape.block_pair("moe")
        (N, K), (group_n, group_k) = (shape.N, shape.K), block_shape
        generator = torch.Generator(device="cpu").manual_seed(seed)

        def normal(*sizes: int) -> torch.Tensor:
            return torch.randn(*sizes, generator=generator, dtype=torch.float32)

        def scales(rows: int, cols: int) -> torch.Tensor:
            unit = torch.rand(E, rows, cols, generator=generator, dtype=torch.float32)
            return SCALE_LOW + unit * (SCALE_HIGH - SCALE_LOW)

        x, logits = normal(M, K), normal(M, E)
        fp8 = torch.float8_e4m3fn
        w1, w2 = normal(E, 2 * N, K).to(fp8), normal(E, K, N).to(fp8)
        w1_scale = scales(math.ceil(2 * N / group_n), math.ceil(K / group_k))
        w2_scale = scales(math.ceil(K / group_n), math.ceil(N / group_k))
        x_q, x_scale = quantize_groups(x, group_k)
        tensors = (x_q, x_scale, w1, w1_scale, w2, w2_scale, *route(logits, top_k))
        x_q, x_scale, w1, w1_scale, w2, w2_scale, weights, ids = (t.to(device) for t in tensors)
        return cls(x_q, x_scale, w1, w1_scale, w2, w2_scale, weights, ids, block_shape)

    def weights(self) -> tuple[torch.Tensor, ...]:
        """(w1, w1_scale, w2, w2_scale): what a launch reads that serving does not keep in L2."""
        return (self.w1, self.w1_scale, self.w2, self.w2_scale)

    def reference(self, out_dtype: torch.dtype | None = None) -> torch.Tensor:
        """The whole expert MLP in float64, [M, K]: h = gate_up GEMM; a = silu_and_mul(h)
        re-quantized per 1 x group_k; y = down GEMM of a times the routing weights; the sum of
        y over each token's top_k slots.

        `out_dtype`: the dtype vLLM stores h and silu_and_mul(h) in (bf16 in serving); they are
        rounded to it as there, else a few percent of the re-quantized fp8 codes differ by one
        step and the reference carries about 2% of error no config can remove. On the CPU
        (Triton's interpreter) h is rounded to bf16 toward zero, as the interpreter does. None:
        no rounding.
        """
        (M, top_k), ids, block_shape = self.topk_ids.shape, self.topk_ids, self.block_shape

        def stored(values: torch.Tensor) -> torch.Tensor:
            return values if out_dtype is None else values.to(out_dtype).double()

        up = (self.x, self.x_scale, self.w1, self.w1_scale)
        h = reference_moe_gemm(*up, ids, top_k, block_shape)
        interpreted = h.device.type == "cpu" and out_dtype == torch.bfloat16
        h = _truncate_to_bf16(h) if interpreted else stored(h)
        a, a_scale = quantize_groups(stored(silu_and_mul(h)), block_shape[1])
        weights = self.topk_weights
        y = reference_moe_gemm(a, a_scale, self.w2, self.w2_scale, ids, 1, block_shape, weights)
        return y.view(M, top_k, -1).sum(dim=1)

    def alignment(self, block_size_m: int) -> Alignment:
        """The routing for one BLOCK_SIZE_M as vLLM hands it to the GEMMs at this M, kept: where
        `uses_naive_assignment`, what vLLM 0.33.0's `_prepare_expert_assignment` (fused_moe.py)
        passes instead of `moe_align_block_size`'s outputs (no sorted_token_ids, expert_ids =
        topk_ids.view(-1), [topk_ids.numel() * BLOCK_SIZE_M])."""
        if block_size_m not in self._alignments:
            ids, E = self.topk_ids, self.w1.shape[0]
            if uses_naive_assignment(ids.shape[0], ids.shape[1], E):
                padded = torch.tensor([ids.numel() * block_size_m], dtype=torch.int32)
                found: Alignment = (None, ids.reshape(-1).contiguous(), padded.to(ids.device))
            else:
                found = moe_align_block_size(ids, block_size_m, E)
            self._alignments[block_size_m] = found
        return self._alignments[block_size_m]

    def launch(self, config: KernelConfig, weights: tuple, *, out: Any, out_dtype: Any) -> Any:
        """The expert MLP after routing, [M, K] out_dtype, as vLLM 0.33.0's `fused_experts_impl`
        runs it with one config for both GEMMs (`gemm`): gate_up GEMM into [M * top_k, 2N],
        SiLU-and-mul (float32 math, stored in out_dtype), re-quantization per 1 x group_k, down
        GEMM with the routing weights into [M, top_k, K], the sum over top_k into `out` ([M, K]
        of out_dtype, bf16 or fp16; allocated when None). `weights`: (w1 [E, 2N, K], w1_scale,
        w2 [E, K, N], w2_scale), one copy of `weights()`.

        Raises:
            ValueError: a config the kernel cannot run (`invoke_moe_gemm`'s check).
        """
        w1, w1_scale, w2, w2_scale = weights
        (M, top_k), group_k = self.topk_ids.shape, self.block_shape[1]
        K, N = self.x.shape[1], w2.shape[2]
        if out is None:
            out = torch.empty(M, K, dtype=out_dtype, device=self.x.device)
        routing = (self.topk_weights, *self.alignment(config.BLOCK_SIZE_M))
        launch = {"config": config.as_dict(), "block_shape": self.block_shape}
        gate_up = out.new_empty(M * top_k, 2 * N)
        up = (self.x, self.x_scale, w1, w1_scale, gate_up, *routing)
        self.gemm(*up, mul_routed_weight=False, top_k=top_k, **launch)
        act = quantize_groups(silu_and_mul(gate_up.float()).to(out_dtype).float(), group_k)
        down = out.new_empty(M, top_k, K)
        self.gemm(*act, w2, w2_scale, down, *routing, mul_routed_weight=True, top_k=1, **launch)
        return torch.sum(down, dim=1, out=out)


def vllm_workload(shape: Shape, M: int, *, seed: int, device: str) -> MoeWorkload:
    """The builtin workload's problem (same seed, same data) whose expert GEMMs run the installed
    vLLM's kernel (`vllm_moe_gemm`); vLLM's fused_moe module
    (`tuner.kernels.moe.family.VLLM_MOE`'s) is imported here, so a missing vLLM fails at once."""
    importlib.import_module(VLLM_MOE.module)
    base = MoeWorkload.make(shape, M, seed=seed, device=device)
    return dataclasses.replace(base, gemm=partial(vllm_moe_gemm, module=VLLM_MOE.module))


def meta_gemms(
    config: KernelConfig, shape: Shape, M: int, out_dtype: torch.dtype = DEFAULT_TORCH_DTYPE
) -> list[tuple[tuple, dict]]:
    """The expert MLP's two GEMMs at M tokens as `invoke_moe_gemm` takes them, (args, keywords)
    each, on "meta" tensors (nothing runs), routed as vLLM routes M tokens (naive assignment for
    small batches, else padded to BLOCK_SIZE_M per expert): the gate_up GEMM (A [M, K], B
    [E, 2N, K], top_k) and the down GEMM (A [M * top_k, N], B [E, K, N], top_k 1, weighted)."""
    E, top_k, block_shape = shape.param("E"), shape.param("top_k"), shape.block_pair("moe")
    (gn, gk), block_m, N, K = block_shape, config.BLOCK_SIZE_M, shape.N, shape.K

    def meta(*sizes: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.empty(*sizes, dtype=dtype, device="meta")

    padded = max_padded_slots(M * top_k, E, block_m)
    ids = (padded, -(-padded // block_m), 1)
    routing: tuple[torch.Tensor | None, ...] = tuple(meta(n, dtype=torch.int32) for n in ids)
    if uses_naive_assignment(M, top_k, E):
        routing = (None, meta(M * top_k, dtype=torch.int32), meta(1, dtype=torch.int32))
    launch = {"config": config.as_dict(), "block_shape": block_shape}
    gemms = []
    for rows, n, k, gemm_top_k in ((M, 2 * N, K, top_k), (M * top_k, K, N, 1)):
        fp8 = (meta(rows, k, dtype=torch.float8_e4m3fn), meta(rows, -(-k // gk)))
        weight = (meta(E, n, k, dtype=torch.float8_e4m3fn), meta(E, -(-n // gn), -(-k // gk)))
        out = (meta(rows * gemm_top_k, n, dtype=out_dtype), meta(M, top_k))
        routed = {"mul_routed_weight": gemm_top_k == 1, "top_k": gemm_top_k}
        gemms.append(((*fp8, *weight, *out, *routing), routed | launch))
    return gemms


def compile_for_target(
    config: KernelConfig, arch: int, *, shape: Shape, M: int, out_dtype: Any
) -> Any:
    """Compile both GEMMs of the expert MLP (`meta_gemms`) for an NVIDIA architecture as
    `invoke_moe_gemm` launches them at M tokens there (naive assignment and SWAP_AB where vLLM
    uses them); both binaries land in Triton's cache. Returns the gate_up launch's
    CompiledKernel (both share the tiles).

    Raises:
        ValueError: bad config, block_shape, out_dtype or sizes (`invoke_moe_gemm`'s checks, on
            the "meta" tensors).
        RuntimeError: imported under TRITON_INTERPRET=1.
        triton.CompilationError: the compiler rejected the kernel.
    """
    launches = [
        captured(invoke_moe_gemm, *args, **launch, arch=arch)
        for args, launch in meta_gemms(config, shape, M, out_dtype)
    ]
    compiled = [compile_call(fused_moe_fp8_block_kernel, arch, *launch) for launch in launches]
    return compiled[0]
