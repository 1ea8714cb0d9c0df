"""The fused-MoE block-FP8 kernel on Triton's interpreter against its float64 references: each
expert GEMM and the whole expert MLP, ragged M, top_k 1..8, experts without tokens, E up to 128,
bf16 and fp16, every output element written."""

from __future__ import annotations

import pytest
import torch

from tuner.kernels.accuracy import relative_error
from tuner.kernels.config import KernelConfig
from tuner.kernels.moe.align import moe_align_block_size
from tuner.kernels.moe.kernel import invoke_moe_gemm
from tuner.kernels.moe.reference import make_moe_inputs, reference_moe_gemm
from tuner.kernels.moe.space import default_config
from tuner.kernels.moe.workload import MoeWorkload
from tuner.kernels.shape import Shape

BLOCK = (128, 128)


def _gate_up(inputs, config: KernelConfig, out_dtype: torch.dtype, E: int) -> torch.Tensor:
    """The gate_up GEMM into a NaN-poisoned [M * top_k, 2N] output."""
    M, top_k = inputs.topk_ids.shape
    out = torch.full((M * top_k, inputs.w1.shape[1]), float("nan"), dtype=out_dtype)
    alignment = moe_align_block_size(inputs.topk_ids, config.BLOCK_SIZE_M, E)
    return invoke_moe_gemm(
        inputs.x,
        inputs.x_scale,
        inputs.w1,
        inputs.w1_scale,
        out,
        None,
        *alignment,
        mul_routed_weight=False,
        top_k=top_k,
        config=config.as_dict(),
        block_shape=BLOCK,
    )


@pytest.mark.parametrize(
    ("M", "E", "top_k", "config"),
    [
        (1, 4, 1, KernelConfig(16, 64, 128, 1, 4, 4)),  # one token, one expert
        (7, 8, 3, KernelConfig(32, 128, 64, 16, 4, 2)),  # ragged M, BLOCK_SIZE_K < group_k
        (19, 16, 8, KernelConfig(16, 32, 256, 64, 8, 3)),  # K-tile 256 runs as 128, as vLLM's
        (2, 128, 8, KernelConfig(64, 64, 128, 32, 4, 3)),  # E=128: most experts get no token
    ],
)
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16])
def test_the_gate_up_gemm_writes_every_slot_and_matches_float64(
    M, E, top_k, config, out_dtype
) -> None:
    N, K = 96, 320  # 2N = 192 and K are not multiples of 128: partial scale blocks
    inputs = make_moe_inputs(M, E, N, K, top_k, BLOCK, seed=M)
    out = _gate_up(inputs, config, out_dtype, E)
    ref = reference_moe_gemm(
        inputs.x, inputs.x_scale, inputs.w1, inputs.w1_scale, inputs.topk_ids, top_k, BLOCK
    )
    assert int(torch.isnan(out).sum()) == 0
    assert relative_error(out, ref) < 5e-3
    # Slot t of token t // top_k went to expert topk_ids[t]: row 0 of the output is token 0
    # through its first expert, as a plain dequantized product.
    expert = int(inputs.topk_ids[0, 0])
    dense = (inputs.x[0].double() * inputs.x_scale[0].double().repeat_interleave(128)[:K]) @ (
        inputs.w1[expert].double()
        * inputs.w1_scale[expert]
        .double()
        .repeat_interleave(128, 0)[: 2 * N]
        .repeat_interleave(128, 1)[:, :K]
    ).T
    assert torch.allclose(out[0].double(), dense, rtol=2e-2, atol=1e-3)


def test_the_down_gemm_multiplies_each_slot_by_its_routing_weight() -> None:
    M, E, N, K, top_k = 5, 6, 128, 64, 2
    inputs = make_moe_inputs(M, E, N, K, top_k, BLOCK, seed=3)
    # The down GEMM reads one row per slot (top_k = 1): feed it the gate_up output's shape.
    a = inputs.x.repeat_interleave(top_k, 0)[:, :K].contiguous()
    a_scale = inputs.x_scale.repeat_interleave(top_k, 0).contiguous()
    w2 = inputs.w1[:, :K, :K].contiguous()  # [E, K, K]: hidden K back to K
    w2_scale = inputs.w1_scale[:, :1, :1].contiguous()
    config = KernelConfig(16, 32, 64, 1, 4, 2)
    alignment = moe_align_block_size(inputs.topk_ids, 16, E)
    out = torch.full((M, top_k, K), float("nan"), dtype=torch.float16)
    invoke_moe_gemm(
        a,
        a_scale,
        w2,
        w2_scale,
        out,
        inputs.topk_weights,
        *alignment,
        mul_routed_weight=True,
        top_k=1,
        config=config.as_dict(),
        block_shape=BLOCK,
    )
    ref = reference_moe_gemm(
        a, a_scale, w2, w2_scale, inputs.topk_ids, 1, BLOCK, inputs.topk_weights
    )
    assert int(torch.isnan(out).sum()) == 0
    assert relative_error(out, ref) < 2e-3
    unweighted = reference_moe_gemm(a, a_scale, w2, w2_scale, inputs.topk_ids, 1, BLOCK)
    assert relative_error(out, unweighted) > 0.1  # the weights (< 1) were applied


@pytest.mark.parametrize(
    ("M", "top_k", "out_dtype"),
    [
        (1, 1, torch.bfloat16),
        (3, 2, torch.float16),
        (13, 4, torch.bfloat16),
        (6, 8, torch.float16),
    ],
)
def test_the_expert_mlp_matches_float64_with_the_default_config(M, top_k, out_dtype) -> None:
    shape = Shape(128, 256, BLOCK, (("E", 8), ("top_k", top_k)))
    workload = MoeWorkload.make(shape, M, seed=1, device="cpu")
    out = torch.full(workload.out_shape, float("nan"), dtype=out_dtype)
    workload.launch(default_config(M), workload.weights(), out=out, out_dtype=out_dtype)
    assert workload.out_shape == (M, 256) and int(torch.isnan(out).sum()) == 0
    # bf16: Triton's interpreter rounds the stored bf16 toward zero (the reference mirrors it
    # for the gate_up output; the down output's truncation is the 0.4%).
    bound = 6e-3 if out_dtype == torch.bfloat16 else 1e-3
    assert relative_error(out, workload.reference(out_dtype)) < bound


def test_the_mlp_reference_without_rounding_is_off_by_the_requantization() -> None:
    """Why the reference rounds the intermediates: unrounded, bf16 misses it by about 2%."""
    shape = Shape(128, 256, BLOCK, (("E", 4), ("top_k", 2)))
    workload = MoeWorkload.make(shape, 9, seed=0, device="cpu")
    out = workload.launch(
        KernelConfig(16, 64, 128, 1, 4, 2), workload.weights(), out=None, out_dtype=torch.bfloat16
    )
    assert relative_error(out, workload.reference(torch.bfloat16)) < 6e-3
    assert relative_error(out, workload.reference(None)) > 1e-2


def test_the_wrapper_rejects_bad_input_in_one_line() -> None:
    inputs = make_moe_inputs(2, 4, 64, 128, 2, BLOCK, seed=0)
    alignment = moe_align_block_size(inputs.topk_ids, 16, 4)
    out = torch.empty(4, 128, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="BLOCK_SIZE_M=24 is not a power of two"):
        invoke_moe_gemm(
            inputs.x,
            inputs.x_scale,
            inputs.w1,
            inputs.w1_scale,
            out,
            None,
            *alignment,
            mul_routed_weight=False,
            top_k=2,
            block_shape=BLOCK,
            config={**KernelConfig(24, 64, 128, 1, 4, 2).as_dict(), "SPLIT_K": 1},
        )
    with pytest.raises(ValueError, match=r"B_scale must be \[4, 1, 1\]"):
        invoke_moe_gemm(
            inputs.x,
            inputs.x_scale,
            inputs.w1,
            inputs.w1_scale[:, :, :0],
            out,
            None,
            *alignment,
            mul_routed_weight=False,
            top_k=2,
            block_shape=BLOCK,
            config=KernelConfig(16, 64, 128, 1, 4, 2).as_dict(),
        )
    with pytest.raises(ValueError, match="topk_weights must hold 4"):
        invoke_moe_gemm(
            inputs.x,
            inputs.x_scale,
            inputs.w1,
            inputs.w1_scale,
            out,
            None,
            *alignment,
            mul_routed_weight=True,
            top_k=2,
            block_shape=BLOCK,
            config=KernelConfig(16, 64, 128, 1, 4, 2).as_dict(),
        )


@pytest.mark.parametrize(
    "config", [KernelConfig(16, 64, 128, 1, 4, 4), KernelConfig(32, 128, 64, 16, 4, 3)]
)
def test_swap_ab_computes_the_same_gemm_transposed(config) -> None:
    """vLLM's sm90 launch (`uses_swap_ab`: BLOCK_SIZE_M < 64, BLOCK_SIZE_N >= 64) run on the
    interpreter by naming the architecture: the same slots, within float64's bound."""
    M, E, N, K, top_k = 9, 4, 96, 320, 2
    inputs = make_moe_inputs(M, E, N, K, top_k, BLOCK, seed=11)
    alignment = moe_align_block_size(inputs.topk_ids, config.BLOCK_SIZE_M, E)
    ref = reference_moe_gemm(
        inputs.x, inputs.x_scale, inputs.w1, inputs.w1_scale, inputs.topk_ids, top_k, BLOCK
    )
    outs = {}
    for arch in (89, 90):
        out = torch.full((M * top_k, 2 * N), float("nan"), dtype=torch.float32).bfloat16()
        invoke_moe_gemm(
            inputs.x,
            inputs.x_scale,
            inputs.w1,
            inputs.w1_scale,
            out,
            None,
            *alignment,
            mul_routed_weight=False,
            top_k=top_k,
            config=config.as_dict(),
            block_shape=BLOCK,
            arch=arch,
        )
        assert int(torch.isnan(out).sum()) == 0
        assert relative_error(out, ref) < 5e-3
        outs[arch] = out.double()
    assert relative_error(outs[90], outs[89]) < 5e-3
    launched = []
    capture = type(
        "Capture",
        (),
        {
            "__getitem__": lambda self, grid: (
                lambda *args, **kwargs: launched.append(kwargs["SWAP_AB"])
            )
        },
    )()
    for arch in (89, 90, None):
        invoke_moe_gemm(
            inputs.x,
            inputs.x_scale,
            inputs.w1,
            inputs.w1_scale,
            out,
            None,
            *alignment,
            mul_routed_weight=False,
            top_k=top_k,
            config=config.as_dict(),
            block_shape=BLOCK,
            arch=arch,
            kernel=capture,
        )
    assert launched == [False, True, False]  # None: CPU tensors, no GPU capability


def test_small_batches_take_vllms_naive_assignment_and_match_float64() -> None:
    """M * top_k * 4 <= E: one slot per program, no sorted_token_ids (vLLM 0.33.0's
    `_prepare_expert_assignment`); the expert MLP through it matches the aligned path's
    reference."""
    shape = Shape(128, 256, BLOCK, (("E", 32), ("top_k", 4)))
    for M in (1, 2):
        workload = MoeWorkload.make(shape, M, seed=5, device="cpu")
        config = default_config(M)
        sorted_ids, expert_ids, padded = workload.alignment(config.BLOCK_SIZE_M)
        assert sorted_ids is None
        assert expert_ids.tolist() == workload.inputs.topk_ids.reshape(-1).tolist()
        assert padded.tolist() == [M * 4 * config.BLOCK_SIZE_M]
        out = workload.launch(config, workload.weights(), out=None, out_dtype=torch.float16)
        assert relative_error(out, workload.reference(torch.float16)) < 1e-3
    # One more token is past the rule: sorted by expert as before.
    workload = MoeWorkload.make(shape, 3, seed=5, device="cpu")
    assert workload.alignment(16)[0] is not None


def test_naive_assignment_needs_one_expert_per_slot() -> None:
    inputs = make_moe_inputs(2, 16, 64, 128, 2, BLOCK, seed=0)
    out = torch.empty(4, 128, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="expert_ids must hold the expert of each of the 4"):
        invoke_moe_gemm(
            inputs.x,
            inputs.x_scale,
            inputs.w1,
            inputs.w1_scale,
            out,
            None,
            None,
            torch.zeros(3, dtype=torch.int32),
            torch.tensor([64], dtype=torch.int32),
            mul_routed_weight=False,
            top_k=2,
            block_shape=BLOCK,
            config=KernelConfig(16, 64, 128, 1, 4, 2).as_dict(),
        )
