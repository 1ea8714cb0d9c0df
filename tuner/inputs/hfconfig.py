"""Block-FP8 GEMM shapes of a standard decoder from its Hugging Face `config.json` and a TP size.

The rule (one decoder layer; vLLM's tensor-parallel linears, vllm/model_executor/layers/linear.py,
and its models llama.py, qwen2.py, qwen3.py; Mistral runs as Llama):

- head_dim = config `head_dim` if set, else hidden_size // num_attention_heads;
  kv = num_key_value_heads (default num_attention_heads).
- qkv_proj, QKVParallelLinear: heads per rank = num_attention_heads / tp; kv heads per rank =
  kv / tp, or 1 when tp >= kv (each kv head is then replicated on tp / kv ranks).
  N = (heads per rank + 2 * kv heads per rank) * head_dim, K = hidden_size.
- o_proj, RowParallelLinear: N = hidden_size, K = num_attention_heads * head_dim / tp.
- gate_up_proj, MergedColumnParallelLinear: N = 2 * intermediate_size / tp, K = hidden_size.
- down_proj, RowParallelLinear: N = hidden_size, K = intermediate_size / tp.

vLLM refuses to load a block-FP8 checkpoint when a split does not divide
(`validate_fp8_block_shape`, quantization/utils/fp8_utils.py): with tp > 1 a row-parallel K per
rank must be a multiple of group_k; each part of a merged or split column-parallel N per rank (q,
k, v; gate, up) a multiple of group_n. So does this module, rather than guessing. The embedding,
lm_head and norms are left out.

MoE experts (vLLM's FusedMoE, model_executor/layers/fused_moe/layer.py, run by the fused-MoE
kernel, not the dense one): E = `num_experts` (Qwen MoE) or `num_local_experts` (Mixtral) or
`n_routed_experts` (DeepSeek); N = moe_intermediate_size / tp (the per-rank intermediate size,
w2_shape[2]; the file name's N), K = hidden_size, top_k = num_experts_per_tok. vLLM's
Fp8MoEMethod.create_weights (quantization/fp8.py) refuses block FP8 experts whose per-rank
intermediate size is not a multiple of block_n, or (tp > 1) of block_k; so does this module.
Expert parallelism (which keeps N whole and splits E) is not derived. Qwen3MoeForCausalLM's dense
layers are its attention projections, plus a dense MLP of intermediate_size when `mlp_only_layers`
lists layers or `decoder_sparse_step` is not 1 (Qwen3MoeDecoderLayer, models/qwen3_moe.py). For
other architectures with an expert count (DeepSeek, Mixtral, ...) only the experts are derived.
Checkpoints that are not block FP8 (BF16, per-tensor FP8, ...) are refused: vLLM never runs the
block-FP8 kernel for them (`block_shape_of` says which are).

vLLM runs the W8A8 block-FP8 Triton kernel only for block-quantized FP8 weights with dynamic
1 x group_k activation groups. Two checkpoint layouts say so:

- `"quant_method": "fp8"` (vLLM's Fp8Config, model_executor/layers/quantization/fp8.py):
  `weight_block_size: [group_n, group_k]` makes it block-wise; without it the weights are FP8
  per tensor. Fp8Config refuses block-wise weights whose `activation_scheme` is not "dynamic".
- `"quant_method": "compressed-tensors"` (vLLM's compressed_tensors/compressed_tensors.py and
  schemes/compressed_tensors_w8a8_fp8.py; compressed-tensors' QuantizationArgs and its FP8_BLOCK
  preset): each of `config_groups` has `"weights"` of `"type": "float"`, 8 bits and `"strategy":
  "block"` (not "tensor", "channel" or "group"), its `block_structure` the block, and dynamic
  `"input_activations"`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tuner.inputs.shapes import MODEL_TYPE_RE, read_text

# Architectures whose layers follow the rule above (vLLM's llama.py builds the first two,
# qwen2.py, qwen3.py and qwen3_moe.py the others).
KNOWN_ARCHITECTURES = (
    "LlamaForCausalLM MistralForCausalLM Qwen2ForCausalLM Qwen3ForCausalLM Qwen3MoeForCausalLM"
).split()
EXPERT_COUNT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")
MAX_SIZE = 2**24  # far above any real hidden or intermediate size; keeps N and K in range
_BLOCK_LIMIT = 4096
_NOTHING = "vLLM runs no block-FP8 GEMM for it, so there is nothing to tune"


@dataclass(frozen=True)
class DerivedShapes:
    """The block-FP8 GEMMs of a model at one TP size.

    Attributes:
        architecture: the config's architecture, e.g. "Qwen3ForCausalLM".
        block_shape: [group_n, group_k] (`weight_block_size`, or compressed-tensors' weights
            `block_structure`; `block_shape_of`).
        layers: (N, K, name) of each linear layer's weight B [N, K] on one rank: qkv_proj,
            o_proj, gate_up_proj, down_proj in that order (an MoE model's attention projections
            only, or none for an architecture whose dense layers are not derived).
        model: `_name_or_path` of the config, when it has one.
        moe: (E, N, K, top_k) of the routed experts on one rank (w13 [E, 2N, K], w2 [E, K, N]),
            when the config has an expert count.
        model_type: `model_type_of(config)`.
    """

    architecture: str
    block_shape: tuple[int, int]
    layers: tuple[tuple[int, int, str], ...]
    model: str | None
    moe: tuple[tuple[int, int, int, int], ...] = ()
    model_type: str | None = None

    @property
    def shapes(self) -> tuple[tuple[int, int], ...]:
        """Distinct (N, K), in layer order."""
        return tuple(dict.fromkeys((n, k) for n, k, _ in self.layers))


def _size(config: Mapping, key: str, where: str) -> int:
    value = config.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SIZE:
        raise ValueError(f"{where}: {key} = {value!r:.40} is not an integer in 1..{MAX_SIZE}")
    return value


def _divide(numerator: int, denominator: int, what: str, where: str) -> int:
    """numerator / denominator, or one line saying vLLM's `divide` would refuse it."""
    if numerator % denominator:
        raise ValueError(f"{where}: {what}: {numerator} is not divisible by {denominator}")
    return numerator // denominator


def _check_blocks(
    checks: list[tuple[str, int, int]], tp: int, block_shape: tuple[int, int], where: str
) -> None:
    """vLLM's `validate_fp8_block_shape`: each (what, size per rank, 0 for group_n or 1 for
    group_k) must be a multiple of its group; group_k (row-parallel K) only with tp > 1."""
    for what, size, group in checks:
        if (group == 0 or tp > 1) and size % block_shape[group]:
            raise ValueError(
                f"{where}: at TP {tp} the {what} is {size} per rank, not a multiple of "
                f"{('group_n', 'group_k')[group]} {block_shape[group]}: vLLM refuses this "
                "checkpoint"
            )


def _moe(
    config: Mapping, tp: int, block_shape: tuple[int, int], where: str
) -> tuple[tuple[int, int, int, int], ...]:
    """The routed experts' shape per rank (module doc), or () without an expert count."""
    key = next((k for k in EXPERT_COUNT_KEYS if config.get(k) is not None), None)
    if key is None:
        return ()
    experts = _size(config, key, where)
    top_k = _size(config, "num_experts_per_tok", where)
    if top_k > experts:
        raise ValueError(f"{where}: num_experts_per_tok {top_k} is more than {key} {experts}")
    intermediate = _size(config, "moe_intermediate_size", where)
    n = _divide(intermediate, tp, "moe_intermediate_size over tp", where)
    _check_blocks([("experts' N", n, 0), ("experts' N", n, 1)], tp, block_shape, where)
    return ((experts, n, _size(config, "hidden_size", where), top_k),)


def _architecture(config: Mapping, where: str) -> tuple[str, bool]:
    """The config's one architecture, and whether its dense layers are derived (it is in
    KNOWN_ARCHITECTURES); another is accepted only with an expert count (MoE experts only).
    ValueError (one line) for an unknown dense model (or a file that is no model's config)."""
    architectures = config.get("architectures")
    name = architectures[0] if isinstance(architectures, list) and len(architectures) == 1 else None
    is_moe = any(config.get(k) is not None for k in EXPERT_COUNT_KEYS)
    if not (isinstance(name, str) and (name in KNOWN_ARCHITECTURES or is_moe)):
        raise ValueError(
            f"{where}: architectures {architectures!r:.80} is not one of "
            f"{', '.join(KNOWN_ARCHITECTURES)} (other architectures: their MoE experts only)"
        )
    return name, name in KNOWN_ARCHITECTURES


def derive_shapes(config: Mapping, tp: int, *, where: str = "config.json") -> DerivedShapes:
    """The (N, K) per rank of a decoder's dense linear layers and its MoE experts (module doc).

    Args:
        config: the parsed `config.json`.
        tp: tensor-parallel size.
        where: the config's name in error messages.

    Raises:
        ValueError: one line: a checkpoint vLLM runs no block-FP8 GEMM for (`block_shape_of`),
            an architecture not in `KNOWN_ARCHITECTURES` and without an expert count, a
            missing or non-integer size, a split that does not divide, or a per-rank size
            that is not a multiple of the block_shape (vLLM refuses those too).
    """
    architecture, known = _architecture(config, where)
    block_shape = block_shape_of(config, where)
    return DerivedShapes(
        architecture=architecture,
        block_shape=block_shape,
        layers=_dense_layers(config, tp, architecture, block_shape, where) if known else (),
        model=name if isinstance(name := config.get("_name_or_path"), str) and name else None,
        moe=_moe(config, tp, block_shape, where),
        model_type=model_type_of(config),
    )


def _dense_layers(
    config: Mapping, tp: int, architecture: str, block_shape: tuple[int, int], where: str
) -> tuple[tuple[int, int, str], ...]:
    """The dense layers per rank of a known architecture (module doc), checked against the
    block_shape as vLLM checks them."""
    hidden = _size(config, "hidden_size", where)
    heads = _size(config, "num_attention_heads", where)
    has_kv = config.get("num_key_value_heads") is not None
    kv = _size(config, "num_key_value_heads" if has_kv else "num_attention_heads", where)
    # Qwen3-MoE layers have a dense MLP only where mlp_only_layers or decoder_sparse_step say.
    dense_mlp = architecture != "Qwen3MoeForCausalLM" or (
        bool(config.get("mlp_only_layers")) or config.get("decoder_sparse_step", 1) != 1
    )
    intermediate = _size(config, "intermediate_size", where) if dense_mlp else 0
    if config.get("head_dim") is not None:
        head_dim = _size(config, "head_dim", where)
    else:
        head_dim = _divide(hidden, heads, "head_dim = hidden_size / num_attention_heads", where)
    q_size = _divide(heads, tp, "num_attention_heads over tp", where) * head_dim
    if tp >= kv:  # each kv head replicated on tp / kv ranks, which must divide
        _divide(tp, kv, "tp over num_key_value_heads (kv head replicas)", where)
    kv_size = (1 if tp >= kv else _divide(kv, tp, "num_key_value_heads over tp", where)) * head_dim
    inter = _divide(intermediate, tp, "intermediate_size over tp", where)
    # Merged column-parallel parts (group_n) and row-parallel K (group_k).
    checks = [("q part of qkv_proj", q_size, 0), ("k/v part of qkv_proj", kv_size, 0)]
    checks += [("gate/up part of gate_up_proj", inter, 0)] if dense_mlp else []
    checks += [("o_proj K", q_size, 1)] + ([("down_proj K", inter, 1)] if dense_mlp else [])
    _check_blocks(checks, tp, block_shape, where)
    layers = [(q_size + 2 * kv_size, hidden, "qkv_proj"), (hidden, q_size, "o_proj")]
    if dense_mlp:
        layers += [(2 * inter, hidden, "gate_up_proj"), (hidden, inter, "down_proj")]
    return tuple(layers)


def model_type_of(config: Mapping) -> str | None:
    """The model type vLLM's kernel selection reads (`hf_text_config.model_type`): a
    multimodal config's `text_config` model type, else the config's own (vLLM 0.33.0,
    transformers_utils/config.py get_hf_text_config takes the text config); None when it has
    none or it is not a plain lower-case name."""
    text = config.get("text_config")
    value = (text if isinstance(text, Mapping) else config).get("model_type")
    return value if isinstance(value, str) and MODEL_TYPE_RE.fullmatch(value) else None


def read_config(path: Path) -> dict:
    """Read a `config.json`.

    Raises:
        ValueError: one line naming the file: unreadable, not UTF-8, not JSON, or not a JSON
            object.
    """
    text = read_text(path)
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{path}: invalid JSON: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def _two_ints(value: object, what: str, where: str) -> tuple[int, int]:
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(type(v) is int and 1 <= v <= _BLOCK_LIMIT for v in value)
    ):
        raise ValueError(
            f"{where}: {what} must be two integers in 1..{_BLOCK_LIMIT}, got {value!r}"[:200]
        )
    return value[0], value[1]


def _mapping(value: object) -> Mapping:
    return value if isinstance(value, Mapping) else {}


def _group_block(group: object, label: str, where: str) -> tuple[int, int]:
    """The block_structure of one of compressed-tensors' config_groups, or the refusal."""
    weights = _mapping(_mapping(group).get("weights"))
    activations = _mapping(group).get("input_activations")
    dynamic = isinstance(activations, Mapping) and activations.get("dynamic") is True
    kind = (weights.get("type"), weights.get("num_bits"), weights.get("strategy"))
    if kind != ("float", 8, "block") or not dynamic:
        raise ValueError(
            f"{where}: {label} weights are {kind[0]!r:.12} of {kind[1]!r:.6} bits, strategy "
            f"{kind[2]!r:.20}, with{'' if dynamic else 'out'} dynamic input_activations: not "
            f"FP8 blocks with dynamic activations; {_NOTHING}"
        )
    return _two_ints(weights.get("block_structure"), f"{label}.weights.block_structure", where)


def block_shape_of(config: Mapping, where: str) -> tuple[int, int]:
    """The [group_n, group_k] a checkpoint's block-FP8 weights are quantized with (from
    `weight_block_size`, quant_method "fp8", or the weights' `block_structure`, quant_method
    "compressed-tensors"; module doc).

    Raises:
        ValueError: one line: no quantization_config (BF16/FP16), per-tensor, per-channel or
            per-group FP8, static activations, another quant_method, or a malformed one.
    """
    quant = config.get("quantization_config")
    if not isinstance(quant, Mapping):
        raise ValueError(
            f"{where}: no quantization_config object (an unquantized BF16/FP16 checkpoint): "
            + _NOTHING
        )
    method = quant.get("quant_method")
    if method == "fp8" and quant.get("weight_block_size") is None:
        raise ValueError(
            f"{where}: quant_method 'fp8' without weight_block_size is per-tensor FP8: {_NOTHING}"
        )
    if method == "fp8" and quant.get("activation_scheme", "dynamic") != "dynamic":
        raise ValueError(f"{where}: weight_block_size without dynamic activations: vLLM refuses it")
    if method == "fp8":
        return _two_ints(quant["weight_block_size"], "quantization_config.weight_block_size", where)
    groups = quant.get("config_groups")
    if method != "compressed-tensors" or not isinstance(groups, Mapping) or not groups:
        raise ValueError(
            f"{where}: quant_method {method!r:.40} is not block FP8 (only 'fp8' with "
            "weight_block_size and 'compressed-tensors' with block config_groups are)"
        )
    blocks = {_group_block(g, f"config_groups.{name}"[:60], where) for name, g in groups.items()}
    if len(blocks) != 1:
        raise ValueError(f"{where}: config_groups have several block_structures {sorted(blocks)}")
    return blocks.pop()
