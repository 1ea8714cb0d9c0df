"""The stand-in vLLM's selection (`tests.standin_vllm`): vLLM 0.33.0's DeepGEMM helpers, its
Humming reordering, `choose_scaled_mm_linear_kernel` over its 8 block-FP8 kernels, and the
fused-MoE config and oracle, at its module paths with its names and signatures. No vLLM code."""

from __future__ import annotations

from pathlib import Path

from tests.standin_vllm_parts import SCALED_MM, append, filled

# vLLM 0.33.0, vllm/utils/deep_gemm.py: the model types DeepGEMM is turned off for, per
# Blackwell family (`_DEEPGEMM_BLACKWELL_EXCLUDED_MODEL_TYPES`); DeepGEMM runs on a Hopper or
# Blackwell GPU with VLLM_USE_DEEP_GEMM (default 1), and for a linear layer needs bf16 output,
# N % 64 == 0 and K % 128 == 0 (should_use_deepgemm_for_fp8_linear).
_DEEP_GEMM_UTILS = """
import os

import torch

from vllm.platforms import current_platform

_OFF_ON_BLACKWELL = {"qwen3_5_text": (100, 120), "qwen3_5_moe_text": (100, 120),
                     "kolibri1": (120,)}


def is_deep_gemm_supported():
    return (current_platform.support_deep_gemm()
            and os.environ.get("VLLM_USE_DEEP_GEMM", "1") != "0")


def should_auto_disable_deep_gemm(model_type):
    return any(current_platform.is_device_capability_family(family)
               for family in _OFF_ON_BLACKWELL.get(model_type, ()))


def should_use_deepgemm_for_fp8_linear(output_dtype, weight_shape, supports_deep_gemm=None):
    if supports_deep_gemm is None:
        supports_deep_gemm = is_deep_gemm_supported()
    return (supports_deep_gemm and output_dtype == torch.bfloat16
            and weight_shape[0] % 64 == 0 and weight_shape[1] % 128 == 0)
"""

# vLLM 0.33.0, model_executor/layers/quantization/utils/humming/priority.py: on compute
# capability 90 Humming moves directly ahead of Marlin; every other kernel keeps its place.
_HUMMING_PRIORITY = """
from enum import Enum


def prefers_humming(compute_capability=None):
    if compute_capability is None:
        from vllm.platforms import current_platform

        seen = current_platform.get_device_capability()
        compute_capability = seen.to_int() if seen is not None else None
    return compute_capability == 90


def prioritize_humming(kernels, compute_capability=None):
    if not prefers_humming(compute_capability):
        return kernels
    names = [(k.name if isinstance(k, Enum) else k.__name__).lower() for k in kernels]
    humming = next((i for i, n in enumerate(names) if "humming" in n), None)
    marlin = next((i for i, n in enumerate(names) if "marlin" in n), None)
    if humming is None or marlin is None or humming < marlin:
        return kernels
    moved = list(kernels)
    moved.insert(marlin, moved.pop(humming))
    return moved
"""

# vLLM 0.33.0's kernels/linear/__init__.py: the 8 block-FP8 kernels of
# `_POSSIBLE_FP8_BLOCK_KERNELS[CUDA]` in its order; the selection walks them after the Humming
# reordering and the --linear-backend filter (`_resolve_backend_kernels`), each refusal with its
# reason. DENSE_VARIABLE overrides the answer (a class name, or raise:<text>).
_LINEAR = """
import os as _os

from vllm.config import get_current_vllm_config as _get_current_vllm_config
from vllm.config import get_current_vllm_config_or_none as _config_or_none
from vllm.model_executor.layers.quantization.utils.humming import prioritize_humming
from vllm.platforms import PlatformEnum as _PlatformEnum
from vllm.platforms import current_platform as _current_platform
from @SCALED@ import FP8ScaledMMLinearLayerConfig  # noqa: F401
from @SCALED@.b12x import B12xFp8BlockScaledMMKernel
from @SCALED@.cutlass import CutlassFp8BlockScaledMMKernel
from @SCALED@.deep_gemm import DeepGemmFp8BlockScaledMMKernel
from @SCALED@.flashinfer import FlashInferFp8DeepGEMMDynamicBlockScaledKernel
from @SCALED@.humming import HummingFP8ScaledMMLinearKernel
from @SCALED@.marlin import MarlinFP8ScaledMMLinearKernel
from @SCALED@.pytorch import BlockWiseTorchFP8ScaledMMLinearKernel
from @SCALED@.triton import TritonFp8BlockScaledMMKernel

_POSSIBLE_FP8_BLOCK_KERNELS = {_PlatformEnum.CUDA: [
    FlashInferFp8DeepGEMMDynamicBlockScaledKernel, DeepGemmFp8BlockScaledMMKernel,
    CutlassFp8BlockScaledMMKernel, B12xFp8BlockScaledMMKernel, MarlinFP8ScaledMMLinearKernel,
    HummingFP8ScaledMMLinearKernel, TritonFp8BlockScaledMMKernel,
    BlockWiseTorchFP8ScaledMMLinearKernel]}
_BY_BACKEND = {"triton": TritonFp8BlockScaledMMKernel, "marlin": MarlinFP8ScaledMMLinearKernel,
               "humming": HummingFP8ScaledMMLinearKernel,
               "deep_gemm": DeepGemmFp8BlockScaledMMKernel,
               "cutlass": CutlassFp8BlockScaledMMKernel, "b12x": B12xFp8BlockScaledMMKernel,
               "flashinfer_cutlass": FlashInferFp8DeepGEMMDynamicBlockScaledKernel,
               "torch": BlockWiseTorchFP8ScaledMMLinearKernel}


def _resolve_backend_kernels(kernels, layer_desc, *, quantization, compute_capability=None):
    kernels = prioritize_humming(kernels, compute_capability)
    config = _config_or_none()
    backend = "auto" if config is None else config.kernel_config.linear_backend
    kept = [kernel for kernel in kernels if kernel is _BY_BACKEND.get(backend)]
    return kept or kernels


def is_supported_and_can_implement_kernel(kernel, config, compute_capability):
    if kernel.__name__ in _os.environ.get("VLLM_DISABLED_KERNELS", "").split(","):
        return False, f"{kernel.__name__} is disabled by VLLM_DISABLED_KERNELS"
    seen = _current_platform.get_device_capability()
    if compute_capability is None and seen is not None:
        compute_capability = seen.to_int()
    supported, why = kernel.is_supported(compute_capability)
    if not supported:
        return False, f"{kernel.__name__} {why}."
    implements, why = kernel.can_implement(config)
    if not implements:
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
    reasons = []
    for kernel in kernels:
        ok, why = is_supported_and_can_implement_kernel(kernel, config, compute_capability)
        if ok:
            return kernel
        reasons.append(why)
    raise ValueError("stand-in: no kernel can implement the layer: " + "; ".join(reasons))
""".replace("@SCALED@", SCALED_MM)

_MOE_ACTIVATION = """
from enum import Enum


class MoEActivation(Enum):
    SILU = "silu"
"""

_MOE_CONFIG = """
from dataclasses import dataclass
from enum import IntEnum


class RoutingMethodType(IntEnum):
    Default = 0
    Renormalize = 1
    DeepSeekV3 = 2


@dataclass
class FusedMoEParallelConfig:
    tp_size: int
    ep_size: int

    @classmethod
    def make_no_parallel(cls):
        return cls(tp_size=1, ep_size=1)


@dataclass
class FusedMoEConfig:
    num_experts: int
    experts_per_token: int
    hidden_dim: int
    intermediate_size: int
    num_local_experts: int
    num_logical_experts: int
    activation: object
    device: object
    routing_method: object
    moe_parallel_config: FusedMoEParallelConfig
    in_dtype: object
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
    """vLLM 0.33.0's selection functions at its module paths with its signatures
    (utils/deep_gemm.py, quantization/utils/humming/, kernels/linear/__init__.py,
    fused_moe/config.py and oracle/fp8.py), answering from the environment variables of
    `tests.standin_vllm_parts`; no vLLM code."""
    for module, text in (  # packages: their text goes in __init__.py
        ("vllm.utils.deep_gemm", _DEEP_GEMM_UTILS),
        (
            "vllm.model_executor.layers.quantization.utils.humming.__init__",
            "\nfrom .priority import prefers_humming, prioritize_humming  # noqa: F401\n",
        ),
        ("vllm.model_executor.layers.quantization.utils.humming.priority", _HUMMING_PRIORITY),
        ("vllm.model_executor.kernels.linear.__init__", _LINEAR),
        ("vllm.model_executor.layers.fused_moe.activation", _MOE_ACTIVATION),
        ("vllm.model_executor.layers.fused_moe.config", _MOE_CONFIG),
        ("vllm.model_executor.layers.fused_moe.oracle.fp8", _MOE_ORACLE),
    ):
        append(root, module, filled(text))
