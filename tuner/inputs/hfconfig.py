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
block-FP8 kernel for them (tuner.inputs.quantization says which are).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tuner.inputs.quantization import block_shape_of
from tuner.inputs.shapes import MODEL_TYPE_RE

# Architectures whose layers follow the rule above (vLLM's llama.py builds the first two,
# qwen2.py, qwen3.py and qwen3_moe.py the others).
KNOWN_ARCHITECTURES = (
    "LlamaForCausalLM MistralForCausalLM Qwen2ForCausalLM Qwen3ForCausalLM Qwen3MoeForCausalLM"
).split()
EXPERT_COUNT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")
MAX_SIZE = 2**24  # far above any real hidden or intermediate size; keeps N and K in range
_MAX_CONFIG_BYTES = 4 * 2**20


@dataclass(frozen=True)
class LayerShape:
    """One linear layer's weight B [N, K] on one rank."""

    layer: str
    N: int
    K: int


@dataclass(frozen=True)
class MoeShape:
    """The routed experts of an MoE layer on one rank: w13 [E, 2N, K] and w2 [E, K, N] (fp8)."""

    E: int
    N: int
    K: int
    top_k: int


@dataclass(frozen=True)
class DerivedShapes:
    """The dense block-FP8 GEMMs of a model at one TP size.

    Attributes:
        architecture: the config's architecture, e.g. "Qwen3ForCausalLM".
        tp: tensor-parallel size.
        block_shape: [group_n, group_k] (`weight_block_size`, or compressed-tensors' weights
            `block_structure`; see tuner.inputs.quantization).
        layers: qkv_proj, o_proj, gate_up_proj, down_proj in that order (an MoE model's
            attention projections only, or none for an architecture whose dense layers are not
            derived).
        model: `_name_or_path` of the config, when it has one.
        moe: the fused-MoE expert shape, when the config has an expert count.
        model_type: `model_type_of(config)`.
    """

    architecture: str
    tp: int
    block_shape: tuple[int, int]
    layers: tuple[LayerShape, ...]
    model: str | None
    moe: tuple[MoeShape, ...] = ()
    model_type: str | None = None

    @property
    def shapes(self) -> tuple[tuple[int, int], ...]:
        """Distinct (N, K), in layer order."""
        return tuple(dict.fromkeys((layer.N, layer.K) for layer in self.layers))


def _size(config: Mapping, key: str, where: str) -> int:
    value = config.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{where}: {key} = {value!r:.40} is not an integer")
    if not 1 <= value <= MAX_SIZE:
        shown = value if value.bit_length() < 64 else f"a {len(str(value))}-digit number"
        raise ValueError(f"{where}: {key}={shown} is outside 1..{MAX_SIZE}")
    return value


def _divide(numerator: int, denominator: int, what: str, where: str) -> int:
    """numerator / denominator, or one line saying vLLM's `divide` would refuse it."""
    if numerator % denominator:
        raise ValueError(f"{where}: {what}: {numerator} is not divisible by {denominator}")
    return numerator // denominator


def derive_moe(
    config: Mapping, tp: int, block_shape: tuple[int, int], *, where: str = "config.json"
) -> tuple[MoeShape, ...]:
    """The routed experts' shape per rank (rule in the module doc), or () without an expert count.

    Args:
        config: the parsed `config.json`.
        tp: tensor-parallel size (experts are split by TP, not by expert parallelism).
        block_shape: [group_n, group_k] of the checkpoint.
        where: the config's name in error messages.

    Returns:
        One MoeShape (E, N = moe_intermediate_size / tp, K = hidden_size, top_k), or ().

    Raises:
        ValueError: one line: a missing or non-integer size, top_k above E, a split that does
            not divide, or an N per rank that is not a multiple of the block_shape.
    """
    key = next((k for k in EXPERT_COUNT_KEYS if config.get(k) is not None), None)
    if key is None:
        return ()
    experts = _size(config, key, where)
    top_k = _size(config, "num_experts_per_tok", where)
    if top_k > experts:
        raise ValueError(f"{where}: num_experts_per_tok {top_k} is more than {key} {experts}")
    hidden = _size(config, "hidden_size", where)
    n = _divide(
        _size(config, "moe_intermediate_size", where), tp, "moe_intermediate_size over tp", where
    )
    group_n, group_k = block_shape
    if n % group_n or (tp > 1 and n % group_k):
        group = group_n if n % group_n else group_k
        raise ValueError(
            f"{where}: at TP {tp} the experts have {n} intermediate rows per rank, "
            f"not a multiple of the block size {group}: vLLM refuses this checkpoint"
        )
    return (MoeShape(E=experts, N=n, K=hidden, top_k=top_k),)


def _dense_mlp(config: Mapping, architecture: str) -> bool:
    """Whether the architecture's decoder layers have a dense MLP of intermediate_size."""
    if architecture != "Qwen3MoeForCausalLM":
        return True
    return bool(config.get("mlp_only_layers")) or config.get("decoder_sparse_step", 1) != 1


def _architecture(config: Mapping, where: str) -> tuple[str, bool]:
    """The config's one architecture, and whether its dense layers are derived (it is in
    KNOWN_ARCHITECTURES); another is accepted only with an expert count (MoE experts only).
    ValueError (one line) for a file that is no model's config or an unknown dense model."""
    architectures = config.get("architectures")
    if architectures is None and not any(key in config for key in ("model_type", "hidden_size")):
        raise ValueError(
            f"{where}: not a model's config.json (no architectures, model_type or "
            "hidden_size): pass the config.json of a Hugging Face checkpoint"
        )
    name = architectures[0] if isinstance(architectures, list) and len(architectures) == 1 else None
    is_moe = any(config.get(k) is not None for k in EXPERT_COUNT_KEYS)
    # KNOWN_ARCHITECTURES holds names only: a known architecture is a str.
    if not (isinstance(name, str) and (name in KNOWN_ARCHITECTURES or is_moe)):
        names = ", ".join(KNOWN_ARCHITECTURES)
        raise ValueError(
            f"{where}: architectures {architectures!r} is not one of {names}; "
            "other architectures are not derived, but for their MoE experts "
            "(shapes from a log still work)"[:400]
        )
    return name, name in KNOWN_ARCHITECTURES


def derive_shapes(config: Mapping, tp: int, *, where: str = "config.json") -> DerivedShapes:
    """The (N, K) per rank of a decoder's dense linear layers and its MoE experts (module doc).

    Args:
        config: the parsed `config.json`.
        tp: tensor-parallel size.
        where: the config's name in error messages.

    Returns:
        The dense layers' shapes, the MoE experts' shape (when the config has an expert count)
        and the block_shape.

    Raises:
        NotBlockFp8Error (a ValueError): one line: a checkpoint vLLM runs no block-FP8 GEMM for
            (BF16, per-tensor/channel/group FP8, another quant_method).
        ValueError: one line: an architecture not in `KNOWN_ARCHITECTURES` (listing them) and
            without an expert count, a missing or non-integer size, a split that does not
            divide, or a per-rank size that is not a multiple of the block_shape (vLLM refuses
            those too).
    """
    if isinstance(tp, bool) or not isinstance(tp, int) or not 1 <= tp <= 1024:
        raise ValueError(f"--tp must be an integer in 1..1024, got {tp!r}")
    architecture, known = _architecture(config, where)
    layers: tuple[LayerShape, ...] = ()
    if known:
        layers, block_shape = _dense_layers(config, tp, architecture, where)
    else:  # MoE experts only
        block_shape = block_shape_of(config, where)
    return DerivedShapes(
        architecture=architecture,
        tp=tp,
        block_shape=block_shape,
        layers=layers,
        model=name if isinstance(name := config.get("_name_or_path"), str) and name else None,
        moe=derive_moe(config, tp, block_shape, where=where),
        model_type=model_type_of(config),
    )


def _dense_layers(
    config: Mapping, tp: int, architecture: str, where: str
) -> tuple[tuple[LayerShape, ...], tuple[int, int]]:
    """The dense layers per rank of a known architecture (module doc), checked against the
    block_shape as vLLM checks them; and the block_shape."""
    hidden = _size(config, "hidden_size", where)
    heads = _size(config, "num_attention_heads", where)
    kv_key = "num_key_value_heads" if config.get("num_key_value_heads") is not None else ""
    kv = _size(config, kv_key or "num_attention_heads", where)
    dense_mlp = _dense_mlp(config, architecture)
    intermediate = _size(config, "intermediate_size", where) if dense_mlp else 0
    if config.get("head_dim") is not None:
        head_dim = _size(config, "head_dim", where)
    else:
        head_dim = _divide(hidden, heads, "head_dim = hidden_size / num_attention_heads", where)
    block_shape = block_shape_of(config, where)
    q_size = _divide(heads, tp, "num_attention_heads over tp", where) * head_dim
    if tp >= kv:  # each kv head replicated on tp / kv ranks, which must divide
        _divide(tp, kv, "tp over num_key_value_heads (kv head replicas)", where)
    kv_size = (1 if tp >= kv else _divide(kv, tp, "num_key_value_heads over tp", where)) * head_dim
    inter = _divide(intermediate, tp, "intermediate_size over tp", where)
    # validate_fp8_block_shape: merged column-parallel parts (always) and row-parallel K (tp > 1).
    checks = [("q part of qkv_proj", q_size, 0), ("k/v part of qkv_proj", kv_size, 0)]
    checks += [("gate/up part of gate_up_proj", inter, 0)] if dense_mlp else []
    checks += [("o_proj K", q_size, 1)] + ([("down_proj K", inter, 1)] if dense_mlp else [])
    for what, size, group in checks:
        if (group == 0 or tp > 1) and size % block_shape[group]:
            raise ValueError(
                f"{where}: at TP {tp} the {what} is {size} per rank, not a multiple of "
                f"{('group_n', 'group_k')[group]} {block_shape[group]}: vLLM refuses this "
                "checkpoint"
            )
    layers = [
        LayerShape("qkv_proj", q_size + 2 * kv_size, hidden),
        LayerShape("o_proj", hidden, q_size),
    ]
    if dense_mlp:
        layers += [
            LayerShape("gate_up_proj", 2 * inter, hidden),
            LayerShape("down_proj", hidden, inter),
        ]
    return tuple(layers), block_shape


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

    Args:
        path: the file.

    Returns:
        The parsed JSON object.

    Raises:
        ValueError: one line naming the file: unreadable, too large, not UTF-8, not JSON, or
            not a JSON object.
    """
    try:
        if path.is_dir():
            raise ValueError(f"{path}: is a folder; pass the model's config.json")
        if path.stat().st_size > _MAX_CONFIG_BYTES:
            raise ValueError(f"{path}: larger than {_MAX_CONFIG_BYTES} bytes: not a config.json")
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise ValueError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8 text") from None
    if not text.strip():
        raise ValueError(f"{path}: empty file")
    try:
        data = json.loads(text)
    except RecursionError:
        raise ValueError(f"{path}: JSON nested too deeply") from None
    except ValueError as exc:
        raise ValueError(f"{path}: invalid JSON: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data
