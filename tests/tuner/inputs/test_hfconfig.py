"""Shapes from a model's config.json: vLLM's sharding rule on Llama-, Qwen2- and Qwen3-style
configs written here; block sizes from `weight_block_size` and from compressed-tensors'
`block_structure`; refusals instead of guesses (BF16, per-tensor and per-channel FP8 among
them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tuner.inputs.hfconfig import derive_shapes, model_type_of, read_config

FP8 = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
# Llama-3-8B-like: no head_dim (hidden / heads = 128), GQA 32 / 8.
LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "quantization_config": FP8,
}
# Qwen2-7B-like: 28 heads, 4 kv heads, no head_dim.
QWEN2 = {
    "architectures": ["Qwen2ForCausalLM"],
    "hidden_size": 3584,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "intermediate_size": 18944,
    "quantization_config": FP8,
}
# Qwen3-0.6B-like: explicit head_dim 128 while hidden / heads = 64.
QWEN3 = {
    "architectures": ["Qwen3ForCausalLM"],
    "hidden_size": 1024,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 3072,
    "_name_or_path": "Qwen/Qwen3-0.6B-FP8",
    "quantization_config": FP8,
}


def layers(config: dict, tp: int) -> list[tuple[str, int, int]]:
    return [(name, n, k) for n, k, name in derive_shapes(config, tp).layers]


@pytest.mark.parametrize(
    ("config", "tp", "expected"),
    [
        (LLAMA, 2, [(3072, 4096), (4096, 2048), (14336, 4096), (4096, 7168)]),
        # tp 16 > 8 kv heads: each rank keeps one kv head (replicated on 2 ranks).
        (LLAMA, 16, [(512, 4096), (4096, 256), (1792, 4096), (4096, 896)]),
        (QWEN2, 2, [(2304, 3584), (3584, 1792), (18944, 3584), (3584, 9472)]),
        (QWEN3, 1, [(4096, 1024), (1024, 2048), (6144, 1024), (1024, 3072)]),  # its head_dim
    ],
)
def test_vllms_sharding_of_real_configs(config: dict, tp: int, expected: list) -> None:
    names = ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"]
    assert layers(config, tp) == [(name, *nk) for name, nk in zip(names, expected, strict=True)]
    derived = derive_shapes(config, tp)
    assert (derived.architecture, derived.block_shape) == (config["architectures"][0], (128, 128))
    assert derived.shapes == tuple(expected)
    assert derived.model == config.get("_name_or_path")


# The MoE fields of Qwen/Qwen3-30B-A3B-FP8's config.json.
QWEN3_MOE = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "hidden_size": 2048,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "intermediate_size": 6144,
    "moe_intermediate_size": 768,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "quantization_config": FP8,
}


BLOCK_64_128 = {**FP8, "weight_block_size": [64, 128]}
REFUSALS = [
    ({**LLAMA, "architectures": ["Qwen3"]}, 2, "['Qwen3'] is not one of LlamaForCausalLM, Mistral"),
    (QWEN2, 8, "num_attention_heads over tp: 28 is not divisible by 8"),
    ({**QWEN2, "num_attention_heads": 24}, 1, "hidden_size / num_attention_heads: 3584 is not"),
    ({**QWEN2, "num_key_value_heads": 3, "head_dim": 96}, 2, "heads over tp: 3 is not divisible"),
    ({**LLAMA, "num_key_value_heads": 3}, 4, "heads (kv head replicas): 4 is not divisible by 3"),
    # Llama-2-7B's 11008 at TP 4 is 2752 rows per rank: vLLM refuses the block-FP8 checkpoint.
    ({**LLAMA, "intermediate_size": 11008}, 4, "gate_up_proj is 2752 per rank, not a multiple"),
    # group_k 128 > group_n 64: the row-parallel K per rank is checked on its own
    (
        {**LLAMA, "intermediate_size": 14464, "quantization_config": BLOCK_64_128},
        2,
        "at TP 2 the down_proj K is 7232 per rank, not a multiple of group_k 128",
    ),
    ({**LLAMA, "hidden_size": "4096"}, 1, "hidden_size = '4096' is not an integer"),
    ({**LLAMA, "num_attention_heads": 0}, 1, "num_attention_heads = 0 is not an integer in 1.."),
    ({**LLAMA, "quantization_config": {**FP8, "weight_block_size": [1]}}, 1, "two integers in"),
    # TP 4: 768 / 4 = 192 rows per rank, not a multiple of 128.
    (QWEN3_MOE, 4, "at TP 4 the experts' N is 192 per rank, not a multiple of group_n 128"),
    ({**QWEN3_MOE, "num_experts_per_tok": 129}, 1, "tok 129 is more than num_experts 128"),
]


def compressed(strategy: str, block=None, dynamic=True, **groups: dict) -> dict:
    """A compressed-tensors quantization_config as llm-compressor writes it (its `group_0`), the
    QuantizationArgs fields vLLM reads."""
    weights = {"block_structure": block, "num_bits": 8, "strategy": strategy, "type": "float"}
    group_0 = {"weights": weights, "input_activations": {"dynamic": dynamic, "strategy": "group"}}
    return {"config_groups": {"group_0": group_0, **groups}, "quant_method": "compressed-tensors"}


FP8_BLOCK = compressed("block", [128, 128])  # compressed-tensors' FP8_BLOCK preset
GROUP_0 = "cfg.json: config_groups.group_0 weights are 'float' of 8 bits, strategy"


@pytest.mark.parametrize(
    ("quant", "block_shape"),
    [
        (FP8_BLOCK, (128, 128)),
        # [group_n, group_k] in that order, as vLLM's GroupShape(*weight_block_size) reads it.
        (compressed("block", [128, 64]), (128, 64)),
        ({"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [64, 128]}, (64, 128)),
    ],
)
def test_block_checkpoints_give_their_block(quant: dict, block_shape: tuple) -> None:
    assert derive_shapes(with_quant(quant), 2).block_shape == block_shape


def with_quant(quant: dict | None) -> dict:
    config = {k: v for k, v in LLAMA.items() if k != "quantization_config"}
    return config if quant is None else {**config, "quantization_config": quant}


QUANT_REFUSALS = [
    (None, "cfg.json: no quantization_config object (an unquantized BF16/FP16"),
    ({"quant_method": "fp8"}, "'fp8' without weight_block_size is per-tensor FP8: vLLM runs"),
    ({**FP8, "activation_scheme": "static"}, "weight_block_size without dynamic activations"),
    (compressed("tensor"), f"{GROUP_0} 'tensor', with dynamic input_activations: not FP8 blocks"),
    (compressed("block", [128, 128], dynamic=False), "'block', without dynamic input_activations"),
    ({"quant_method": "awq"}, "'awq' is not block FP8"),
    (
        compressed("block", [64, 64], b=FP8_BLOCK["config_groups"]["group_0"]),
        "config_groups have several block_structures [(64, 64), (128, 128)]",
    ),
]
REFUSALS += [(with_quant(quant), 2, message) for quant, message in QUANT_REFUSALS]


@pytest.mark.parametrize(("config", "tp", "message"), REFUSALS)
def test_refusals_are_one_line(config: dict, tp: int, message: str) -> None:
    with pytest.raises(ValueError) as raised:
        derive_shapes(config, tp, where="cfg.json")
    text = str(raised.value)
    assert "\n" not in text and text.startswith("cfg.json: ")
    assert message in text


def test_moe_configs_give_their_experts_and_their_dense_mlp_layers() -> None:
    """Qwen3-30B-A3B at TP 2 and DeepSeek-V3's experts only: tests/cli/test_moe_shapes_cli.py."""
    assert derive_shapes(QWEN3_MOE, 1).moe == ((128, 768, 2048, 8),)
    # A dense MLP layer (mlp_only_layers) brings gate_up/down of intermediate_size back.
    assert layers({**QWEN3_MOE, "mlp_only_layers": [0]}, 2)[2:] == [
        ("gate_up_proj", 6144, 2048),
        ("down_proj", 2048, 3072),
    ]
    assert derive_shapes(QWEN3, 1).moe == ()
    mixtral = {"architectures": ["MixtralForCausalLM"], "hidden_size": 7168}
    mixtral |= {"num_local_experts": 8, "moe_intermediate_size": 2048, "num_experts_per_tok": 2}
    derived = derive_shapes({**mixtral, "quantization_config": FP8}, 1)
    assert (derived.layers, derived.moe) == ((), ((8, 2048, 7168, 2),))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "invalid JSON: Expecting value"),
        (b'{"hidden_size": 4096,', "invalid JSON: Expecting property name enclosed in"),
        (b"[1, 2]", "expected a JSON object, got list"),
        (b"\xff\xfe{}", "not UTF-8 text"),
    ],
)
def test_bad_config_files(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(content)
    with pytest.raises(ValueError) as raised:
        read_config(path)
    assert str(raised.value).startswith(f"{path}: {message}")
    path.write_text(json.dumps(LLAMA))
    assert read_config(path) == LLAMA


def test_the_model_type_is_the_text_configs_as_vllm_reads_it() -> None:
    assert model_type_of({"model_type": "deepseek_v3"}) == "deepseek_v3"
    multimodal = {"model_type": "qwen3_5", "text_config": {"model_type": "qwen3_5_text"}}
    assert model_type_of(multimodal) == "qwen3_5_text"
    assert model_type_of({"architectures": ["X"]}) is None
    assert model_type_of({"model_type": "Not A Type"}) is None
