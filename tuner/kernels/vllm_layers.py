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

_LAYER_CONFIG = "vllm.model_executor.kernels.linear.scaled_mm.ScaledMMLinearKernel"
_QUANT_UTILS = "vllm.model_executor.layers.quantization.utils.quant_utils"


def block_fp8_layer_config(N: int, K: int, dtype) -> Any:
    """vLLM's description of a block-FP8 linear layer, as `init_fp8_linear_kernel` makes it
    (vLLM 0.33.0, kernels/linear/__init__.py): weight [N, K] with 128x128 static FP8 blocks
    (`kFp8Static128BlockSym`), activations in dynamic 1x128 groups (`kFp8Dynamic128Sym`),
    input and output in `dtype` (a torch dtype).

    Raises:
        Exception: whatever importing vLLM's config class or keys raises.
    """
    keys = importlib.import_module(_QUANT_UTILS)
    return importlib.import_module(_LAYER_CONFIG).FP8ScaledMMLinearLayerConfig(
        weight_quant_key=keys.kFp8Static128BlockSym,
        activation_quant_key=keys.kFp8Dynamic128Sym,
        weight_shape=(N, K),
        input_dtype=dtype,
        out_dtype=dtype,
    )
