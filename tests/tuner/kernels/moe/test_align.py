"""moe_align_block_size and the routing, against hand-worked examples."""

from __future__ import annotations

import pytest
import torch

from tuner.kernels.moe.space import max_padded_slots
from tuner.kernels.moe.workload import moe_align_block_size, route


def test_slots_are_grouped_by_expert_and_padded_to_the_block() -> None:
    # 3 tokens, top_k 2: slots 0..5 go to experts 2, 0 | 2, 3 | 0, 2; expert 1 gets none.
    topk_ids = torch.tensor([[2, 0], [2, 3], [0, 2]], dtype=torch.int32)
    sorted_ids, expert_ids, padded = moe_align_block_size(topk_ids, 4, 4)
    pad = 6  # numel: the padding value, masked by the kernel
    assert max_padded_slots(6, 4, 4) == 6 + 4 * 3 == sorted_ids.numel()
    # expert 0: slots 1 and 4; expert 2: slots 0, 2, 5; expert 3: slot 3; then padding
    expected = [1, 4, pad, pad] + [0, 2, 5, pad] + [3, pad, pad, pad] + [pad] * 6
    assert sorted_ids.tolist() == expected
    assert expert_ids.tolist() == [0, 2, 3, 0, 0]  # blocks past 12 are never read
    assert padded.tolist() == [12] and padded.dtype == torch.int32


def test_fewer_slots_than_experts_allocate_one_block_per_slot() -> None:
    topk_ids = torch.tensor([[5]], dtype=torch.int32)
    sorted_ids, expert_ids, padded = moe_align_block_size(topk_ids, 16, 128)
    assert sorted_ids.numel() == 16 and sorted_ids.tolist() == [0] + [1] * 15
    assert expert_ids.tolist() == [5] and padded.tolist() == [16]


def test_bad_expert_ids_are_refused() -> None:
    with pytest.raises(ValueError, match=r"expert ids must lie in \[0, 4\)"):
        moe_align_block_size(torch.tensor([[4]]), 16, 4)


def test_routing_takes_the_top_k_softmax_weights_renormalized() -> None:
    logits = torch.tensor([[0.0, 2.0, 1.0, -1.0]])
    weights, ids = route(logits, 2)
    assert ids.tolist() == [[1, 2]] and ids.dtype == torch.int32
    e = torch.tensor([2.0, 1.0]).exp()
    assert torch.allclose(weights, (e / e.sum()).unsqueeze(0))
    with pytest.raises(ValueError, match="top_k must be in 1..4"):
        route(logits, 5)
