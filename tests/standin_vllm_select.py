"""The stand-in vLLM's block-FP8 linear kernels and selection (`tests.standin_vllm`): vLLM
0.33.0's kernel classes (those the tests meet), `choose_scaled_mm_linear_kernel` and the
fused-MoE config and oracle at its module paths with its names and signatures, answering
from the environment variables of `tests.standin_vllm_parts`. Each kernel refuses with one
rule, enough to exercise what the tuner does with vLLM's answers; the facts of vLLM's own
table (its kernels, their order, DeepGEMM's model types) are checked against the real wheel
in tests/engines/test_vllm_selection.py. Marlin computes with torch. No vLLM code."""

from __future__ import annotations

from pathlib import Path

from tests.standin_vllm_parts import SCALED_MM, append, filled

# Every class in ScaledMMLinearKernel.py; each of vLLM's modules re-exports its own.
_KERNELS = """
import os
from types import SimpleNamespace

import torch

from vllm.config import get_current_vllm_config
from vllm.platforms import current_platform

PROCESSED = []
APPLIED = []


class FP8ScaledMMLinearLayerConfig(SimpleNamespace):  # weight_shape, out_dtype, ...
    pass


def _seen(compute_capability):
    seen = current_platform.get_device_capability()
    return compute_capability or (seen.to_int() if seen is not None else 0)


class FP8ScaledMMLinearKernel:
    NEEDS = ()  # the compute capabilities it runs on; () any CUDA GPU

    def __init__(self, c, layer_param_names):
        assert self.is_supported()[0] and self.can_implement(c)[0]
        self.config, self.layer_param_names = c, layer_param_names

    @classmethod
    def is_supported(cls, compute_capability=None):
        if not current_platform.is_cuda():
            return False, "needs CUDA"
        if cls.NEEDS and _seen(compute_capability) not in cls.NEEDS:
            return False, f"needs compute capability {cls.NEEDS}"
        return True, None

    @classmethod
    def can_implement(cls, config):
        return True, None


class DeepGemmFp8BlockScaledMMKernel(FP8ScaledMMLinearKernel):
    NEEDS = (90, 100, 120)

    @classmethod
    def can_implement(cls, config):
        model_config = get_current_vllm_config().model_config
        if model_config is None:
            return False, "needs a model configuration"
        model_type = model_config.hf_text_config.model_type
        if model_type == "qwen3_5_text" and _seen(None) >= 100:
            return False, f"is turned off for model type {model_type} here"
        N, K = config.weight_shape
        if config.out_dtype != torch.bfloat16 or N % 64 or K % 128:
            return False, "does not take this weight shape or dtype"
        return True, None


class FlashInferFp8DeepGEMMDynamicBlockScaledKernel(DeepGemmFp8BlockScaledMMKernel):
    @classmethod
    def is_supported(cls, compute_capability=None):
        if os.environ.get("@FLASHINFER@") != "1" or _seen(compute_capability) != 90:
            return False, "has no usable FlashInfer block-scale FP8 GEMM here"
        return super().is_supported(compute_capability)


class CutlassFp8BlockScaledMMKernel(FP8ScaledMMLinearKernel):
    NEEDS = (90, 100)  # Hopper and later: not sm89


class HummingFP8ScaledMMLinearKernel(FP8ScaledMMLinearKernel):
    @classmethod
    def is_supported(cls, compute_capability=None):
        return False, "Humming is not installed"


class TritonFp8BlockScaledMMKernel(FP8ScaledMMLinearKernel):
    pass


class MarlinFP8ScaledMMLinearKernel(FP8ScaledMMLinearKernel):
    # Its "repacking" stores the dequantized weight as [K, N] float32: a caller that skipped
    # processing gets a wrong product. PROCESSED and APPLIED count the calls.
    def process_weights_after_loading(self, layer):
        group_n, group_k = layer.weight_block_size
        N, K = layer.output_size_per_partition, layer.input_size_per_partition
        scale = layer.weight_scale_inv.repeat_interleave(group_n, 0)
        scale = scale.repeat_interleave(group_k, 1)[:N, :K]
        dense = (layer.weight.float() * scale).t().contiguous()
        layer.weight = torch.nn.Parameter(dense, requires_grad=False)
        PROCESSED.append((N, K))

    def apply_weights(self, layer, x, bias=None):
        APPLIED.append(tuple(x.shape))
        return (x.float() @ layer.weight).to(x.dtype)
"""
_MODULES = {
    "deep_gemm": "DeepGemmFp8BlockScaledMMKernel",
    "flashinfer": "FlashInferFp8DeepGEMMDynamicBlockScaledKernel",
    "cutlass": "CutlassFp8BlockScaledMMKernel",
    "triton": "TritonFp8BlockScaledMMKernel",
    "marlin": "MarlinFP8ScaledMMLinearKernel, PROCESSED, APPLIED",
    "humming": "HummingFP8ScaledMMLinearKernel",
}

# kernels/linear/__init__.py: the kernels in vLLM's order (B12x's and torch's left out),
# Humming moved ahead of Marlin on compute capability 90, and the walk, each refusal with its
# reason. DENSE_VARIABLE overrides the answer (a class name, or raise:<text>).
_LINEAR = """
import os as _os

from vllm.config import get_current_vllm_config as _get_current_vllm_config
from vllm.platforms import PlatformEnum as _PlatformEnum
from vllm.platforms import current_platform as _current_platform
from @SCALED@ import ScaledMMLinearKernel as _k

_POSSIBLE_FP8_BLOCK_KERNELS = {_PlatformEnum.CUDA: [
    _k.FlashInferFp8DeepGEMMDynamicBlockScaledKernel, _k.DeepGemmFp8BlockScaledMMKernel,
    _k.CutlassFp8BlockScaledMMKernel, _k.MarlinFP8ScaledMMLinearKernel,
    _k.HummingFP8ScaledMMLinearKernel, _k.TritonFp8BlockScaledMMKernel]}


def _resolve_backend_kernels(kernels, layer_desc, *, quantization, compute_capability=None):
    kernels = list(kernels)
    if _k._seen(compute_capability) == 90:
        humming = kernels.pop(kernels.index(_k.HummingFP8ScaledMMLinearKernel))
        kernels.insert(kernels.index(_k.MarlinFP8ScaledMMLinearKernel), humming)
    return kernels


def is_supported_and_can_implement_kernel(kernel, config, compute_capability):
    supported = kernel.is_supported(_k._seen(compute_capability))
    for ok, why in (supported, kernel.can_implement(config)):
        if not ok:
            return False, f"{kernel.__name__} {why}."
    return True, ""


def choose_scaled_mm_linear_kernel(config, possible_kernels, compute_capability=None,
                                   force_kernel=None, *, quantization):
    assert quantization == "fp8_block_w8a8" and config.weight_shape[1] % 128 == 0
    _get_current_vllm_config()
    answer = _os.environ.get("@DENSE@")
    if answer and answer.startswith("raise:"):
        raise RuntimeError(answer.removeprefix("raise:"))
    kernels = _resolve_backend_kernels(possible_kernels.get(_current_platform._enum, []),
                                       "scaled-mm", quantization=quantization,
                                       compute_capability=compute_capability)
    if answer:
        return next((k for k in kernels if k.__name__ == answer), None) or type(answer, (), {})
    for kernel in kernels:
        if is_supported_and_can_implement_kernel(kernel, config, compute_capability)[0]:
            return kernel
    raise ValueError("stand-in: no kernel can implement the layer")
"""

_MOE_ACTIVATION = """
from enum import Enum


class MoEActivation(Enum):
    SILU = "silu"
"""

_MOE_CONFIG = """
import types
from enum import IntEnum


class RoutingMethodType(IntEnum):
    DeepSeekV3 = 2


class FusedMoEParallelConfig(types.SimpleNamespace):
    @classmethod
    def make_no_parallel(cls):
        return cls(tp_size=1, ep_size=1)


class FusedMoEConfig(types.SimpleNamespace):
    pass
"""

# The MoE oracle reads the current config's model type as vLLM 0.33.0's does
# (fused_moe/oracle/fp8.py: on Blackwell it may turn DeepGEMM off); MODELS_SEEN records it.
_MOE_ORACLE = """
import os
from enum import Enum

from vllm.config import get_current_vllm_config

MODELS_SEEN = []


class Fp8MoeBackend(Enum):
    DEEPGEMM = "DEEPGEMM"
    FLASHINFER_CUTLASS = "FLASHINFER_CUTLASS"
    TRITON = "TRITON"
    MARLIN = "MARLIN"


class TritonExperts:
    pass


def select_fp8_moe_backend(config, weight_key, activation_key, allow_vllm_cutlass=False):
    assert config.moe_parallel_config.ep_size == 1 and not allow_vllm_cutlass
    model_config = get_current_vllm_config().model_config
    MODELS_SEEN.append(None if model_config is None
                       else getattr(model_config.hf_text_config, "model_type", None))
    answer = os.environ.get("@MOE@", "TRITON")
    if answer.startswith("raise:"):
        raise RuntimeError(answer.removeprefix("raise:"))
    return Fp8MoeBackend(answer), TritonExperts if answer == "TRITON" else None
"""


def add_selection(root: Path) -> None:
    """The kernel classes at vLLM 0.33.0's module paths (scaled_mm/*.py), its selection
    (kernels/linear/__init__.py) and its fused-MoE config and oracle (fused_moe/config.py,
    oracle/fp8.py)."""
    append(root, f"{SCALED_MM}.ScaledMMLinearKernel", filled(_KERNELS))
    for module, names in _MODULES.items():
        append(
            root, f"{SCALED_MM}.{module}", f"from .ScaledMMLinearKernel import {names}  # noqa\n"
        )
    for module, text in (  # packages: their text goes in __init__.py
        ("vllm.model_executor.kernels.linear.__init__", _LINEAR.replace("@SCALED@", SCALED_MM)),
        ("vllm.model_executor.layers.fused_moe.activation", _MOE_ACTIVATION),
        ("vllm.model_executor.layers.fused_moe.config", _MOE_CONFIG),
        ("vllm.model_executor.layers.fused_moe.oracle.fp8", _MOE_ORACLE),
    ):
        append(root, module, filled(text))
