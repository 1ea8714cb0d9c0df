"""Whether a checkpoint's `quantization_config` makes vLLM run the block-FP8 GEMM, and its block.

vLLM runs the W8A8 block-FP8 Triton kernel (and reads the config files this tool tunes) only for
block-quantized FP8 weights with dynamic 1 x group_k activation groups. Two checkpoint layouts
say so; everything else runs another kernel or none:

- `"quant_method": "fp8"` (vLLM's Fp8Config, model_executor/layers/quantization/fp8.py):
  `weight_block_size: [group_n, group_k]` makes it block-wise; without it the weights are FP8
  per tensor (cutlass / torch._scaled_mm, no block kernel). Fp8Config refuses block-wise weights
  whose `activation_scheme` is not "dynamic" ("The block-wise quantization only supports dynamic
  activation scheme for now").
- `"quant_method": "compressed-tensors"` (vLLM's compressed_tensors/compressed_tensors.py and
  schemes/compressed_tensors_w8a8_fp8.py; the layout is compressed-tensors' QuantizationArgs,
  src/compressed_tensors/quantization/quant_args.py, and its FP8_BLOCK preset in
  quant_scheme.py): `config_groups` maps a group name to `{"targets": [...], "weights": {...},
  "input_activations": {...}}`. `_is_fp8_w8a8` takes weights of `"type": "float"` with
  `"strategy"` "tensor", "channel" or "block" (static, symmetric); only "block" runs the block
  kernel, with `weight_block_size = weights["block_structure"]` ([128, 128] in FP8_BLOCK, whose
  activations are `"strategy": "group", "group_size": 128, "dynamic": true`), and the scheme
  asserts the input scheme is not static. `"strategy": "group"` weights (FP8 per 1 x 128 group)
  are not W8A8 block FP8 at all.
"""

from __future__ import annotations

from collections.abc import Mapping

_BLOCK_LIMIT = 4096
_NOTHING = "vLLM runs no block-FP8 GEMM for {}, so there is nothing to tune"
# compressed-tensors' FP8 weight strategies that are not blocks, as the refusal names them.
_NOT_BLOCKS = {
    "group": "per-group (1 x group_size)",
    "tensor": "per-tensor",
    "channel": "per-channel",
}


class NotBlockFp8Error(ValueError):
    """The checkpoint is valid but vLLM never runs the block-FP8 kernel for it."""


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


def _fp8_method(quant: Mapping, where: str) -> tuple[int, int]:
    block = quant.get("weight_block_size")
    if block is None:
        raise NotBlockFp8Error(
            f"{where}: quant_method 'fp8' without weight_block_size is per-tensor FP8: "
            + _NOTHING.format("it")
        )
    shape = _two_ints(block, "quantization_config.weight_block_size", where)
    scheme = quant.get("activation_scheme", "dynamic")
    if scheme != "dynamic":
        raise NotBlockFp8Error(
            f"{where}: activation_scheme {scheme!r:.30} with weight_block_size: vLLM refuses "
            "block-wise FP8 without dynamic activations"
        )
    return shape


def _group_block(group: object, label: str, where: str) -> tuple[int, int]:
    """The block_structure of one of compressed-tensors' config_groups, or the refusal."""
    if not isinstance(group, Mapping) or not isinstance(weights := group.get("weights"), Mapping):
        raise NotBlockFp8Error(f"{where}: {label} quantizes no weights: not block FP8")
    if weights.get("type") != "float" or weights.get("num_bits") != 8:
        raise NotBlockFp8Error(
            f"{where}: {label} weights are {weights.get('type')!r:.12} with "
            f"{weights.get('num_bits')!r:.6} bits, not FP8: vLLM runs no block-FP8 GEMM"
        )
    strategy = weights.get("strategy")
    if strategy != "block":
        kind = _NOT_BLOCKS.get(strategy) if isinstance(strategy, str) else None
        raise NotBlockFp8Error(
            f"{where}: {label} weights are FP8 {kind or f'strategy {strategy!r:.20}'}, not "
            f"128x128 blocks: {_NOTHING.format('them')}"
        )
    activations = group.get("input_activations")
    if not isinstance(activations, Mapping) or activations.get("dynamic") is not True:
        raise NotBlockFp8Error(
            f"{where}: {label} block FP8 weights without dynamic input_activations: vLLM "
            "runs block FP8 only with dynamic activation groups"
        )
    return _two_ints(weights.get("block_structure"), f"{label}.weights.block_structure", where)


def _compressed_tensors(quant: Mapping, where: str) -> tuple[int, int]:
    groups = quant.get("config_groups")
    if not isinstance(groups, Mapping) or not groups:
        raise ValueError(f"{where}: compressed-tensors quantization_config has no config_groups")
    shapes = {_group_block(g, f"config_groups.{name}"[:60], where) for name, g in groups.items()}
    if len(shapes) != 1:
        raise ValueError(
            f"{where}: config_groups have several block_structures "
            f"{sorted(shapes)}; a shapes entry has one"
        )
    return shapes.pop()


def block_shape_of(config: Mapping, where: str) -> tuple[int, int]:
    """The [group_n, group_k] a checkpoint's block-FP8 weights are quantized with.

    Args:
        config: the parsed `config.json`.
        where: the config's name in error messages.

    Returns:
        (group_n, group_k) from `weight_block_size` (quant_method "fp8") or from the weights'
        `block_structure` (quant_method "compressed-tensors").

    Raises:
        NotBlockFp8Error: one line: no quantization_config (BF16/FP16), per-tensor or
            per-channel or per-group FP8, static activations, another quant_method.
        ValueError: one line: a malformed quantization_config.
    """
    quant = config.get("quantization_config")
    if quant is None:
        raise NotBlockFp8Error(
            f"{where}: no quantization_config: an unquantized (BF16/FP16) checkpoint; "
            + _NOTHING.format("it")
        )
    if not isinstance(quant, Mapping):
        raise ValueError(f"{where}: quantization_config must be an object")
    method = quant.get("quant_method")
    if method == "fp8":
        return _fp8_method(quant, where)
    if method == "compressed-tensors":
        return _compressed_tensors(quant, where)
    if method is None:
        raise ValueError(f"{where}: quantization_config has no quant_method")
    raise NotBlockFp8Error(
        f"{where}: quant_method {method!r:.40} is not block FP8 (only 'fp8' with "
        "weight_block_size and 'compressed-tensors' with block weights are)"
    )
