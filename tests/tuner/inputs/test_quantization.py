"""Which checkpoints run vLLM's block-FP8 GEMM: block sizes from `weight_block_size` and from
compressed-tensors' `block_structure`; BF16, per-tensor, per-channel and per-group FP8 refused."""

from __future__ import annotations

import pytest

from tests.tuner.inputs.test_hfconfig import LLAMA
from tuner.inputs.hfconfig import derive_shapes
from tuner.inputs.quantization import NotBlockFp8Error


def args(
    strategy: str,
    *,
    dynamic: bool = False,
    block: list | None = None,
    group_size: int | None = None,
    kind: str = "float",
    bits: int = 8,
) -> dict:
    """One QuantizationArgs as compressed-tensors serializes it into config.json."""
    return {
        "actorder": None,
        "block_structure": block,
        "dynamic": dynamic,
        "group_size": group_size,
        "num_bits": bits,
        "observer": "minmax",
        "observer_kwargs": {},
        "strategy": strategy,
        "symmetric": True,
        "type": kind,
    }


def compressed(weights: dict, activations: dict | None) -> dict:
    """A compressed-tensors quantization_config as llm-compressor writes it."""
    return {
        "config_groups": {
            "group_0": {
                "format": "float-quantized",
                "input_activations": activations,
                "output_activations": None,
                "targets": ["Linear"],
                "weights": weights,
            }
        },
        "format": "float-quantized",
        "ignore": ["lm_head"],
        "kv_cache_scheme": None,
        "quant_method": "compressed-tensors",
        "quantization_status": "compressed",
    }


# compressed-tensors' presets: FP8_BLOCK, FP8 (static per tensor), FP8_DYNAMIC (per channel).
FP8_BLOCK = compressed(args("block", block=[128, 128]), args("group", dynamic=True, group_size=128))
FP8_TENSOR = compressed(args("tensor"), args("tensor"))
FP8_GROUP = compressed(args("group", group_size=128), args("group", dynamic=True, group_size=128))


def with_quant(quant: dict | None) -> dict:
    config = {k: v for k, v in LLAMA.items() if k != "quantization_config"}
    return config if quant is None else {**config, "quantization_config": quant}


@pytest.mark.parametrize(
    ("quant", "block_shape"),
    [
        (FP8_BLOCK, (128, 128)),
        # [group_n, group_k] in that order, as vLLM's GroupShape(*weight_block_size) reads it.
        (compressed(args("block", block=[128, 64]), args("group", dynamic=True)), (128, 64)),
        ({"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [64, 128]}, (64, 128)),
    ],
)
def test_block_checkpoints_give_their_block(quant: dict, block_shape: tuple) -> None:
    assert derive_shapes(with_quant(quant), 2).block_shape == block_shape


NOTHING = "vLLM runs no block-FP8 GEMM for it, so there is nothing to tune"


@pytest.mark.parametrize(
    ("quant", "message"),
    [
        (
            None,
            f"cfg.json: no quantization_config: an unquantized (BF16/FP16) checkpoint; {NOTHING}",
        ),
        (
            {"quant_method": "fp8", "activation_scheme": "dynamic"},
            f"cfg.json: quant_method 'fp8' without weight_block_size is per-tensor FP8: {NOTHING}",
        ),
        (
            {"quant_method": "fp8", "activation_scheme": "static", "weight_block_size": [128, 128]},
            "cfg.json: activation_scheme 'static' with weight_block_size: vLLM refuses "
            "block-wise FP8 "
            "without dynamic activations",
        ),
        (
            FP8_GROUP,
            "cfg.json: config_groups.group_0 weights are FP8 per-group (1 x group_size), not "
            "128x128 blocks: vLLM runs no block-FP8 GEMM for them, so there is nothing to tune",
        ),
        (
            FP8_TENSOR,
            "cfg.json: config_groups.group_0 weights are FP8 per-tensor, not 128x128 "
            "blocks: vLLM runs no block-FP8 GEMM for them, so there is nothing to tune",
        ),
        (
            compressed(args("block", block=[128, 128]), args("group", group_size=128)),
            "cfg.json: config_groups.group_0 block FP8 weights without dynamic input_activations: "
            "vLLM runs block FP8 only with dynamic activation groups",
        ),
        (
            compressed(args("channel", kind="int"), args("token", dynamic=True, kind="int")),
            "cfg.json: config_groups.group_0 weights are 'int' with 8 bits, not FP8: vLLM runs no "
            "block-FP8 GEMM",
        ),
        (
            {"quant_method": "awq", "bits": 4, "group_size": 128},
            "cfg.json: quant_method 'awq' is not block FP8 (only 'fp8' with weight_block_size and "
            "'compressed-tensors' with block weights are)",
        ),
        ({"weight_block_size": [128, 128]}, "cfg.json: quantization_config has no quant_method"),
        (
            {"quant_method": "compressed-tensors"},
            "cfg.json: compressed-tensors quantization_config has no config_groups",
        ),
        (
            compressed(args("block", block=[128]), args("group", dynamic=True, group_size=128)),
            "cfg.json: config_groups.group_0.weights.block_structure must be two integers in "
            "1..4096, "
            "got [128]",
        ),
        (
            {
                **FP8_BLOCK,
                "config_groups": {
                    "a": FP8_BLOCK["config_groups"]["group_0"],
                    "b": {
                        **FP8_BLOCK["config_groups"]["group_0"],
                        "weights": args("block", block=[64, 64]),
                    },
                },
            },
            "cfg.json: config_groups have several block_structures [(64, 64), (128, 128)]; a "
            "shapes "
            "entry has one",
        ),
        ("fp8", "cfg.json: quantization_config must be an object"),
    ],
)
def test_what_vllm_runs_no_block_kernel_for_or_cannot_read_is_refused(
    quant: object, message: str
) -> None:
    """NotBlockFp8Error for a valid checkpoint that is not block FP8; a plain ValueError for a
    malformed quantization_config."""
    with pytest.raises(ValueError) as raised:
        derive_shapes(with_quant(quant), 2, where="cfg.json")  # type: ignore[arg-type]
    assert str(raised.value) == message
    malformed = (
        "no quant_method" in message or "must be" in message or "no config_groups" in message
    )
    assert isinstance(raised.value, NotBlockFp8Error) != (malformed or "several" in message)
