"""vLLM's own description of a block-FP8 linear layer, built from vLLM's classes when asked
(vLLM is imported then, never when this module is): what vLLM's kernel selection
(`choose_scaled_mm_linear_kernel`) and its linear-kernel classes take.

Facts about vLLM 0.33.0 (its files under vllm/model_executor/):
- kernels/linear/scaled_mm/ScaledMMLinearKernel.py: `FP8ScaledMMLinearLayerConfig`.
- kernels/linear/__init__.py `init_fp8_linear_kernel`: a block-FP8 layer's weight key is
  `kFp8Static128BlockSym`, its activation key `kFp8Dynamic128Sym`
  (layers/quantization/utils/quant_utils.py).
"""

from __future__ import annotations

import importlib
from typing import Any

# (module, class name) of vLLM's description of a scaled-mm linear layer.
LAYER_CONFIG = (
    "vllm.model_executor.kernels.linear.scaled_mm.ScaledMMLinearKernel",
    "FP8ScaledMMLinearLayerConfig",
)
_QUANT_UTILS = "vllm.model_executor.layers.quantization.utils.quant_utils"


def layer_config_parts() -> tuple[Any, Any, Any]:
    """vLLM's FP8ScaledMMLinearLayerConfig class and its block-FP8 keys (kFp8Static128BlockSym,
    kFp8Dynamic128Sym); raises whatever importing them raises."""
    config_class = getattr(importlib.import_module(LAYER_CONFIG[0]), LAYER_CONFIG[1])
    keys = importlib.import_module(_QUANT_UTILS)
    return config_class, keys.kFp8Static128BlockSym, keys.kFp8Dynamic128Sym


def block_fp8_layer_config(N: int, K: int, dtype) -> Any:
    """vLLM's description of a block-FP8 linear layer, as `init_fp8_linear_kernel` makes it
    (vLLM 0.33.0, kernels/linear/__init__.py): weight [N, K] with 128x128 static FP8 blocks,
    activations in dynamic 1x128 groups, input and output in `dtype` (a torch dtype).

    Raises:
        Exception: whatever importing vLLM's config class or keys raises.
    """
    config_class, weight_key, activation_key = layer_config_parts()
    return config_class(
        weight_quant_key=weight_key,
        activation_quant_key=activation_key,
        weight_shape=(N, K),
        input_dtype=dtype,
        out_dtype=dtype,
    )
