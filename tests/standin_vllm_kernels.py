"""The stand-in vLLM's block-FP8 linear-kernel classes (`tests.standin_vllm`): vLLM 0.33.0's
8 classes at its module paths with its class names and method signatures, each `is_supported`
and `can_implement` deciding as vLLM's does (DeepGEMM reading the model config), Marlin
computing with torch, Humming not installed. No vLLM code."""

from __future__ import annotations

from pathlib import Path

from tests.standin_vllm_parts import SCALED_MM, append, filled

# vLLM 0.33.0's ScaledMMLinearKernel.py: the layer config's fields, the kernel's constructor.
_SCALED_MM_BASE = """
from dataclasses import dataclass as _dataclass

import torch as _torch


@_dataclass
class FP8ScaledMMLinearLayerConfig:
    weight_quant_key: object
    activation_quant_key: object
    weight_shape: tuple
    input_dtype: _torch.dtype
    out_dtype: _torch.dtype


class FP8ScaledMMLinearKernel:
    def __init__(self, c, layer_param_names):
        assert self.can_implement(c)[0]
        assert self.is_supported()[0]
        self.config = c
        self.layer_param_names = layer_param_names
"""

# vLLM 0.33.0's BlockScaledMMLinearKernel.py: the block kernels' base refuses static activation
# scales; a dynamic kernel (FlashInfer DeepGEMM) runs only where both its base and its fallback
# are supported and can implement the layer, and says which of them refused.
_BLOCK_BASE = """
class Fp8BlockScaledMMLinearKernel:
    def __init__(self, config):
        self.config = config

    @classmethod
    def can_implement(cls, config):
        if config.activation_quant_key.scale.static:
            return False, "takes only dynamic per-group activation scales"
        return True, None


class Fp8BlockScaledDynamicMMLinearKernel(Fp8BlockScaledMMLinearKernel):
    base_type = None
    fallback_type = None

    @classmethod
    def _both(cls, ask, verb):
        (base, why_base), (fallback, why_fallback) = ask(cls.base_type), ask(cls.fallback_type)
        if base and fallback:
            return True, None
        refused = [f"its {part} {verb}: {why}" for part, ok, why in (
            ("base", base, why_base), ("fallback", fallback, why_fallback)) if not ok]
        return False, "; ".join(refused)

    @classmethod
    def is_supported(cls, compute_capability=None):
        return cls._both(lambda k: k.is_supported(compute_capability), "is not supported")

    @classmethod
    def can_implement(cls, config):
        return cls._both(lambda k: k.can_implement(config), "cannot implement the layer")
"""

_BLOCK = "from @SCALED@.BlockScaledMMLinearKernel import Fp8BlockScaledMMLinearKernel\n"

# vLLM 0.33.0's scaled_mm/deep_gemm.py: DeepGEMM's can_implement reads the current vLLM config's
# model config (hf_text_config.model_type) and the weight shape; without a model config it
# refuses.
_DEEP_GEMM = (
    _BLOCK
    + """
import torch

from vllm.config import get_current_vllm_config
from vllm.model_executor.layers.quantization.utils.quant_utils import GroupShape
from vllm.platforms import current_platform
from vllm.utils.deep_gemm import (
    is_deep_gemm_supported,
    should_auto_disable_deep_gemm,
    should_use_deepgemm_for_fp8_linear,
)


class DeepGemmFp8BlockScaledMMKernel(Fp8BlockScaledMMLinearKernel):
    @classmethod
    def is_supported(cls, compute_capability=None):
        if not current_platform.is_cuda():
            return False, "needs CUDA"
        if not is_deep_gemm_supported():
            return False, "needs a Hopper or Blackwell GPU"
        return True, None

    @classmethod
    def can_implement(cls, config):
        ok, why = super().can_implement(config)
        if not ok:
            return ok, why
        if config.out_dtype != torch.bfloat16:
            return False, "writes only bfloat16"
        if config.activation_quant_key.scale.group_shape != GroupShape(1, 128):
            return False, "takes only 1x128 activation groups"
        model_config = get_current_vllm_config().model_config
        if model_config is None:
            return False, "needs a model configuration"
        model_type = getattr(model_config.hf_text_config, "model_type", None)
        if should_auto_disable_deep_gemm(model_type):
            return False, f"is turned off for model type {model_type} here"
        if not should_use_deepgemm_for_fp8_linear(config.out_dtype, config.weight_shape):
            return False, "does not take this weight shape or dtype"
        return True, None
"""
)

# vLLM 0.33.0's scaled_mm/flashinfer.py and utils/flashinfer.py: FlashInfer's block-scale GEMM
# runs on compute capability 90 only, with VLLM_BLOCKSCALE_FP8_GEMM_FLASHINFER (default 1) and
# FlashInfer's kernels usable, for bf16 input and output, fp8 weights, N % 64 == 0 and
# K % 128 == 0; FlashInfer DeepGEMM is the dynamic kernel of FlashInfer (base) and DeepGEMM
# (fallback).
_FLASHINFER = (
    _BLOCK.replace(
        "import Fp8BlockScaledMMLinearKernel",
        (
            "import (\n    Fp8BlockScaledDynamicMMLinearKernel,\n    "
            "Fp8BlockScaledMMLinearKernel,\n)"
        ),
    )
    + """
import os

import torch

from vllm.platforms import current_platform
from @SCALED@.deep_gemm import DeepGemmFp8BlockScaledMMKernel


class FlashInferFp8BlockScaledMMKernel(Fp8BlockScaledMMLinearKernel):
    @classmethod
    def is_supported(cls, compute_capability=None):
        if not current_platform.is_cuda():
            return False, "needs CUDA"
        if not (os.environ.get("@FLASHINFER@") == "1"
                and os.environ.get("VLLM_BLOCKSCALE_FP8_GEMM_FLASHINFER", "1") != "0"
                and current_platform.is_device_capability(90)):
            return False, "has no usable FlashInfer block-scale FP8 GEMM here"
        return True, None

    @classmethod
    def can_implement(cls, config):
        ok, why = super().can_implement(config)
        if not ok:
            return ok, why
        N, K = config.weight_shape
        if not (config.out_dtype == config.input_dtype == torch.bfloat16
                and config.weight_quant_key.dtype == torch.float8_e4m3fn
                and N % 64 == 0 and K % 128 == 0):
            return False, "does not take this weight shape or dtype"
        return True, None


class FlashInferFp8DeepGEMMDynamicBlockScaledKernel(Fp8BlockScaledDynamicMMLinearKernel):
    base_type = FlashInferFp8BlockScaledMMKernel
    fallback_type = DeepGemmFp8BlockScaledMMKernel
"""
)

# vLLM 0.33.0's scaled_mm/cutlass.py: CUTLASS's block-FP8 GEMM where vLLM's build supports the
# capability (its ops.cutlass_scaled_mm_supports_block_fp8: Hopper and later, so not sm89,
# where vLLM runs Marlin).
_CUTLASS = (
    _BLOCK
    + """
from vllm.platforms import current_platform


class CutlassFp8BlockScaledMMKernel(Fp8BlockScaledMMLinearKernel):
    @classmethod
    def is_supported(cls, compute_capability=None):
        if not current_platform.is_cuda() or (compute_capability or 0) < 90:
            return False, f"has no block-FP8 GEMM for compute capability {compute_capability}"
        return True, None
"""
)

# vLLM 0.33.0's scaled_mm/b12x.py: the sm120 family only, with the b12x extra installed (not in
# the stand-in).
_B12X = (
    _BLOCK
    + """
from vllm.platforms import current_platform


class B12xFp8BlockScaledMMKernel(Fp8BlockScaledMMLinearKernel):
    @classmethod
    def is_supported(cls, compute_capability=None):
        if not current_platform.is_device_capability_family(120):
            return False, "needs a Blackwell 12x GPU"
        return False, "needs the b12x extra, which is not installed"
"""
)

# vLLM 0.33.0's scaled_mm/triton.py and pytorch.py: Triton runs on any CUDA GPU; torch's
# block-wise scaled_mm only on compute capability 90.
_TRITON_KERNEL = (
    _BLOCK
    + """
from vllm.platforms import current_platform


class TritonFp8BlockScaledMMKernel(Fp8BlockScaledMMLinearKernel):
    @classmethod
    def is_supported(cls, compute_capability=None):
        return (True, None) if current_platform.is_cuda() else (False, "needs CUDA")
"""
)

_TORCH_KERNEL = (
    _BLOCK
    + """
from vllm.platforms import current_platform


class BlockWiseTorchFP8ScaledMMLinearKernel(Fp8BlockScaledMMLinearKernel):
    @classmethod
    def is_supported(cls, compute_capability=None):
        if not current_platform.is_cuda() or compute_capability != 90:
            return False, "needs compute capability 90 for 1x128 and 128x128 block scales"
        return True, None
"""
)

# MarlinFP8ScaledMMLinearKernel with vLLM 0.33.0's signatures; it runs on a CUDA GPU of compute
# capability 7.5 or newer (scaled_mm/marlin.py, marlin_utils_fp8.py); its "repacking" stores
# the dequantized weight as [K, N] float32, so a caller that skipped processing gets a wrong
# product. PROCESSED and APPLIED count the calls.
_MARLIN = """
import torch as _torch

from vllm.model_executor.kernels.linear.scaled_mm.ScaledMMLinearKernel import (
    FP8ScaledMMLinearKernel,
)
from vllm.platforms import current_platform

PROCESSED = []
APPLIED = []


class MarlinFP8ScaledMMLinearKernel(FP8ScaledMMLinearKernel):
    @classmethod
    def is_supported(cls, compute_capability=None):
        if not current_platform.has_device_capability(75):
            return False, "needs a CUDA GPU of compute capability 7.5 or newer"
        return True, None

    @classmethod
    def can_implement(cls, c):
        return True, None

    def __init__(self, c, layer_param_names):
        super().__init__(c, layer_param_names)
        self.marlin_input_dtype = None

    def process_weights_after_loading(self, layer):
        group_n, group_k = layer.weight_block_size
        N, K = layer.output_size_per_partition, layer.input_size_per_partition
        scale = layer.weight_scale_inv.repeat_interleave(group_n, 0)
        scale = scale.repeat_interleave(group_k, 1)[:N, :K]
        dense = (layer.weight.float() * scale).t().contiguous()
        layer.weight = _torch.nn.Parameter(dense, requires_grad=False)
        PROCESSED.append((N, K))

    def apply_weights(self, layer, x, bias=None):
        APPLIED.append(tuple(x.shape))
        out = x.float() @ layer.weight
        if bias is not None:
            out = out + bias
        return out.to(x.dtype)
"""

# HummingFP8ScaledMMLinearKernel as on a machine without Humming (vLLM 0.33.0's reason).
_HUMMING = """
from vllm.model_executor.kernels.linear.scaled_mm.ScaledMMLinearKernel import (
    FP8ScaledMMLinearKernel,
)


class HummingFP8ScaledMMLinearKernel(FP8ScaledMMLinearKernel):
    @classmethod
    def is_supported(cls, compute_capability=None):
        return False, "Humming is not installed"

    @classmethod
    def can_implement(cls, config):
        return True, None
"""


def add_linear_kernels(root: Path) -> None:
    """vLLM 0.33.0's 8 block-FP8 linear-kernel classes at its module paths, with its class names
    and method signatures: each `is_supported` and `can_implement` as vLLM's decides (DeepGEMM
    reading the model config), Marlin computing with torch, Humming not installed."""
    for module, text in (
        ("ScaledMMLinearKernel", _SCALED_MM_BASE),
        ("BlockScaledMMLinearKernel", _BLOCK_BASE),
        ("deep_gemm", _DEEP_GEMM),
        ("flashinfer", _FLASHINFER),
        ("cutlass", _CUTLASS),
        ("b12x", _B12X),
        ("triton", _TRITON_KERNEL),
        ("pytorch", _TORCH_KERNEL),
        ("marlin", _MARLIN),
        ("humming", _HUMMING),
    ):
        append(root, f"{SCALED_MM}.{module}", filled(text.replace("@SCALED@", SCALED_MM)))
    # vLLM 0.33.0's scaled_mm/__init__.py re-exports these (Humming it does not).
    append(
        root,
        f"{SCALED_MM}.__init__",
        f"\nfrom {SCALED_MM}.ScaledMMLinearKernel import (\n"
        "    FP8ScaledMMLinearKernel,\n    FP8ScaledMMLinearLayerConfig,\n)\n"
        f"from {SCALED_MM}.marlin import MarlinFP8ScaledMMLinearKernel\n",
    )
