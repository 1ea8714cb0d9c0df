"""Which checkpoints run vLLM's block-FP8 GEMM: block sizes from `weight_block_size` and from
compressed-tensors' `block_structure`; BF16, per-tensor, per-channel and per-group FP8 refused."""

from __future__ import annotations

import pytest

from tests.tuner.inputs.test_hfconfig import LLAMA
from tuner.inputs.hfconfig import derive_shapes
from tuner.inputs.quantization import NotBlockFp8Error


def args(strategy: str, block=None, *, dynamic=False, kind="float", bits=8) -> dict:
    """The QuantizationArgs fields compressed-tensors writes into config.json that vLLM reads."""
    fields = {"block_structure": block, "dynamic": dynamic, "group_size": 128, "num_bits": bits}
    return fields | {"strategy": strategy, "type": kind}


def group(weights: dict, activations: dict | None) -> dict:
    return {"input_activations": activations, "targets": ["Linear"], "weights": weights}


def compressed(weights: dict, activations: dict | None, **groups: dict) -> dict:
    """A compressed-tensors quantization_config as llm-compressor writes it (its `group_0`)."""
    group_0 = group(weights, activations)
    return {"config_groups": {"group_0": group_0, **groups}, "quant_method": "compressed-tensors"}


# compressed-tensors' presets: FP8_BLOCK, FP8 (static per tensor), FP8_DYNAMIC (per channel).
DYNAMIC = args("group", dynamic=True)
FP8_BLOCK = compressed(args("block", block=[128, 128]), DYNAMIC)
FP8_TENSOR = compressed(args("tensor"), args("tensor"))
FP8_GROUP = compressed(args("group"), DYNAMIC)
GROUP_0 = "cfg.json: config_groups.group_0"
NOTHING = "vLLM runs no block-FP8 GEMM for them, so there is nothing to tune"


def with_quant(quant: object) -> dict:
    config = {k: v for k, v in LLAMA.items() if k != "quantization_config"}
    return config if quant is None else {**config, "quantization_config": quant}


@pytest.mark.parametrize(
    ("quant", "block_shape"),
    [
        (FP8_BLOCK, (128, 128)),
        # [group_n, group_k] in that order, as vLLM's GroupShape(*weight_block_size) reads it.
        (compressed(args("block", block=[128, 64]), DYNAMIC), (128, 64)),
        ({"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [64, 128]}, (64, 128)),
    ],
)
def test_block_checkpoints_give_their_block(quant: dict, block_shape: tuple) -> None:
    assert derive_shapes(with_quant(quant), 2).block_shape == block_shape


REFUSED = [  # (quantization_config, part of its one-line message, valid but not block FP8)
    (None, "cfg.json: no quantization_config: an unquantized (BF16/FP16) checkpoint;", True),
    ({"quant_method": "fp8"}, "fp8' without weight_block_size is per-tensor FP8: vLLM", True),
    (
        {"quant_method": "fp8", "activation_scheme": "static", "weight_block_size": [128, 128]},
        "activation_scheme 'static' with weight_block_size: vLLM refuses",
        True,
    ),
    (FP8_GROUP, f"{GROUP_0} weights are FP8 per-group (1 x group_size), not 128x128", True),
    (FP8_TENSOR, f"{GROUP_0} weights are FP8 per-tensor, not 128x128 blocks: {NOTHING}", True),
    (
        compressed(args("block", block=[128, 128]), args("group")),
        f"{GROUP_0} block FP8 weights without dynamic input_activations: vLLM runs",
        True,
    ),
    (
        compressed(args("channel", kind="int"), args("token", dynamic=True, kind="int")),
        f"{GROUP_0} weights are 'int' with 8 bits, not FP8: vLLM runs no block-FP8 GEMM",
        True,
    ),
    ({"quant_method": "awq", "bits": 4}, "quant_method 'awq' is not block FP8 (only 'fp8'", True),
    ({"weight_block_size": [128, 128]}, "cfg.json: quantization_config has no quant_method", False),
    ({"quant_method": "compressed-tensors"}, "quantization_config has no config_groups", False),
    (
        compressed(args("block", block=[128]), DYNAMIC),
        f"{GROUP_0}.weights.block_structure must be two integers in 1..4096, got [128]",
        False,
    ),
    (
        compressed(args("block", block=[128, 128]), DYNAMIC, b=group(args("tensor"), None)),
        "cfg.json: config_groups.b weights are FP8 per-tensor",
        True,
    ),
    (
        compressed(
            args("block", block=[128, 128]), DYNAMIC, b=group(args("block", [64, 64]), DYNAMIC)
        ),
        "config_groups have several block_structures [(64, 64), (128, 128)]; a shapes entry",
        False,
    ),
    ("fp8", "cfg.json: quantization_config must be an object", False),
]


@pytest.mark.parametrize(("quant", "message", "not_block"), REFUSED)
def test_what_vllm_runs_no_block_kernel_for_or_cannot_read_is_refused(
    quant: object, message: str, not_block: bool
) -> None:
    """NotBlockFp8Error for a valid checkpoint that is not block FP8; a plain ValueError for a
    malformed quantization_config. One line each."""
    with pytest.raises(ValueError) as raised:
        derive_shapes(with_quant(quant), 2, where="cfg.json")
    assert message in str(raised.value) and "\n" not in str(raised.value)
    assert isinstance(raised.value, NotBlockFp8Error) == not_block
