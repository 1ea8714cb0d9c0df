"""Routing for the fused-MoE kernel in torch: seeded top-k routing from gating logits, vLLM's
`moe_align_block_size` (slots sorted by expert, each expert padded to BLOCK_SIZE_M) and its
naive assignment for small batches (one slot per program, no sorting)."""

from __future__ import annotations

import torch

from tuner.kernels.moe.specialization import max_padded_slots


def route(logits: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k routing as vLLM's `fused_topk` with renormalize=True (what benchmark_moe.py runs):
    softmax over the experts, the top_k largest, their weights renormalized to sum to 1.

    Args:
        logits: [M, E] float32 gating logits.
        top_k: experts per token, 1 <= top_k <= E.

    Returns:
        (topk_weights [M, top_k] float32, topk_ids [M, top_k] int32).

    Raises:
        ValueError: top_k out of range.
    """
    E = logits.shape[-1]
    if not 1 <= top_k <= E:
        raise ValueError(f"top_k must be in 1..{E}, got {top_k}")
    weights, ids = torch.topk(torch.softmax(logits.float(), dim=-1), top_k, dim=-1)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights.float().contiguous(), ids.to(torch.int32).contiguous()


def moe_align_block_size(
    topk_ids: torch.Tensor, block_size: int, num_experts: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Group the routed slots by expert and pad each expert's run to a multiple of block_size.

    Same outputs as vLLM 0.33.0's `moe_align_block_size` (CUDA op `moe_align_block_size`, its
    torch golden model in tests/kernels/moe): slot s = token * top_k + j of the flattened
    topk_ids; within an expert, slots keep their order (stable sort). Padding entries hold
    numel (`topk_ids.numel()`), which the kernel masks out. Experts with no slot get no block.

    Args:
        topk_ids: [M, top_k] integer expert ids in [0, num_experts).
        block_size: BLOCK_SIZE_M of the config.
        num_experts: E.

    Returns:
        sorted_token_ids: [max_padded_slots] int32; entries past num_tokens_post_padded hold numel.
        expert_ids: [cdiv(max_padded_slots, block_size)] int32, the expert of each block; 0 past
            the blocks in use (the kernel never reads those).
        num_tokens_post_padded: [1] int32, sum over experts of their padded counts.

    Raises:
        ValueError: block_size or num_experts not positive, or an id out of range.
    """
    if block_size < 1 or num_experts < 1:
        raise ValueError(
            f"block_size and num_experts must be positive, got {block_size}, {num_experts}"
        )
    device = topk_ids.device
    flat = topk_ids.reshape(-1).to(torch.int64)
    numel = flat.numel()
    if numel and (int(flat.min()) < 0 or int(flat.max()) >= num_experts):
        raise ValueError(f"expert ids must lie in [0, {num_experts})")
    total = max_padded_slots(numel, num_experts, block_size)
    sorted_token_ids = torch.full((total,), numel, dtype=torch.int32, device=device)
    expert_ids = torch.zeros((-(-total // block_size),), dtype=torch.int32, device=device)

    counts = torch.bincount(flat, minlength=num_experts)
    padded = (counts + block_size - 1) // block_size * block_size
    starts = torch.cumsum(padded, 0) - padded  # where each expert's run begins
    order = torch.sort(flat, stable=True).indices  # slots grouped by expert, in slot order
    experts_sorted = flat[order]
    first_of_expert = torch.cumsum(counts, 0) - counts
    rank = torch.arange(numel, device=device) - first_of_expert[experts_sorted]
    sorted_token_ids[starts[experts_sorted] + rank] = order.to(torch.int32)

    blocks = padded // block_size
    used = int(blocks.sum())
    expert_ids[:used] = torch.repeat_interleave(
        torch.arange(num_experts, device=device, dtype=torch.int32), blocks
    )
    num_tokens_post_padded = torch.tensor([used * block_size], dtype=torch.int32, device=device)
    return sorted_token_ids, expert_ids, num_tokens_post_padded


def naive_assignment(
    topk_ids: torch.Tensor, block_size: int
) -> tuple[None, torch.Tensor, torch.Tensor]:
    """What vLLM passes the expert GEMMs instead of `moe_align_block_size`'s outputs when it
    assigns one routed slot per program (`tuner.kernels.moe.specialization.uses_naive_assignment`).

    Source: vLLM 0.33.0 fused_moe/fused_moe.py `_prepare_expert_assignment`: no
    sorted_token_ids, expert_ids = topk_ids.view(-1), num_tokens_post_padded =
    [topk_ids.numel() * BLOCK_SIZE_M].

    Args:
        topk_ids: [M, top_k] int32 expert ids.
        block_size: BLOCK_SIZE_M of the config.

    Returns:
        (None, expert_ids [M * top_k] int32, num_tokens_post_padded [1] int32).

    Raises:
        ValueError: block_size is not positive or topk_ids is not int32.
    """
    if block_size < 1:
        raise ValueError(f"block_size must be positive, got {block_size}")
    if topk_ids.dtype != torch.int32:
        raise ValueError(f"topk_ids must be int32, got {topk_ids.dtype}")
    padded = torch.tensor(
        [topk_ids.numel() * block_size], dtype=torch.int32, device=topk_ids.device
    )
    return None, topk_ids.reshape(-1).contiguous(), padded
