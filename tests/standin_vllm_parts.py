"""The parts of the stand-in vLLM (`tests.standin_vllm`) that `tuner doctor`, `tuner compare`
and a sweep's kernel choice reach: vLLM 0.33.0's platform, config, triton_utils, its
kernel-selection functions and its FP8 scaled-mm kernel classes, at its module paths with its
names and signatures, answering from what the tests set. No vLLM code: names, signatures,
module paths and behaviour only (the facts are cited where each piece is written)."""

from __future__ import annotations

from pathlib import Path


def module_path(root: Path, module: str) -> Path:
    """The file of `module` under `root`, its packages' `__init__.py` created."""
    path = root.joinpath(*module.split(".")).with_suffix(".py")
    for folder in [path.parent, *path.parent.parents]:
        if folder == root:
            break
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "__init__.py").touch()
    return path


# What the stand-in answers, read when asked (so a test sets them in the environment of the
# command it runs): the compute capability vLLM "sees" ("9.0"; unset: no GPU, and then
# `VllmConfig()` cannot infer a device type); an override of the dense selection (a kernel class
# name) and the MoE backend; "raise:<text>" makes the function raise RuntimeError(<text>).
CAPABILITY_VARIABLE = "STANDIN_VLLM_CAPABILITY"
DENSE_VARIABLE = "STANDIN_VLLM_DENSE_KERNEL"
MOE_VARIABLE = "STANDIN_VLLM_MOE_BACKEND"
# "1": no active GPU driver, so vllm.triton_utils hands out a placeholder instead of triton,
# unless CUDA_VISIBLE_DEVICES is set and empty (vLLM 0.33.0, vllm/triton_utils/importing.py).
NO_DRIVER_VARIABLE = "STANDIN_VLLM_NO_GPU_DRIVER"
# "1": FlashInfer's block-scale FP8 GEMM is usable (flashinfer-cubin installed, or nvcc and
# ninja to build it: vLLM 0.33.0, vllm/utils/flashinfer.py has_flashinfer); unset: it is not.
FLASHINFER_VARIABLE = "STANDIN_VLLM_FLASHINFER"


def _filled(text: str) -> str:
    """A module's text with the variables' names put in for @CAPABILITY@ and the like."""
    for mark, name in (("@CAPABILITY@", CAPABILITY_VARIABLE), ("@DENSE@", DENSE_VARIABLE),
                       ("@MOE@", MOE_VARIABLE), ("@NO_DRIVER@", NO_DRIVER_VARIABLE),
                       ("@FLASHINFER@", FLASHINFER_VARIABLE)):
        text = text.replace(mark, name)
    return text


# vllm/platforms: a CUDA platform of the capability the test names, else one with no device
# type (vLLM 0.33.0 on a host without a GPU); the capability checks vLLM's kernels call.
_PLATFORMS = """
import enum
import os
from typing import NamedTuple


class PlatformEnum(enum.Enum):
    CUDA = enum.auto()
    ROCM = enum.auto()
    XPU = enum.auto()
    CPU = enum.auto()
    UNSPECIFIED = enum.auto()


class DeviceCapability(NamedTuple):
    major: int
    minor: int

    def to_int(self):
        return self.major * 10 + self.minor


class _Platform:
    def _seen(self):
        seen = os.environ.get("@CAPABILITY@")
        return DeviceCapability(*map(int, seen.split("."))) if seen else None

    @property
    def _enum(self):
        return PlatformEnum.CUDA if self._seen() else PlatformEnum.UNSPECIFIED

    @property
    def device_type(self):
        return "cuda" if self._seen() else ""

    def is_cuda(self):
        return self._seen() is not None

    is_cuda_alike = is_cuda

    def is_rocm(self):
        return False

    def is_xpu(self):
        return False

    def get_device_capability(self, device_id=0):
        return self._seen()

    def is_device_capability(self, capability):
        seen = self._seen()
        return seen is not None and seen.to_int() == capability

    def is_device_capability_family(self, capability):
        seen = self._seen()
        return seen is not None and seen.to_int() // 10 == capability // 10

    def has_device_capability(self, capability):
        seen = self._seen()
        return seen is not None and seen.to_int() >= capability

    def support_deep_gemm(self):
        return (self.is_device_capability(90) or self.is_device_capability_family(100)
                or self.is_device_capability_family(120))


current_platform = _Platform()
"""

# vllm/triton_utils: HAS_TRITON, and triton and tl, or in their place the placeholders vLLM
# 0.33.0 substitutes (a module whose `jit` hands back the plain function, so `kernel[grid]`
# raises TypeError) where it finds no single active GPU driver and CUDA_VISIBLE_DEVICES is not
# set empty (vllm/triton_utils/importing.py). The stand-in's kernels import triton from here,
# as vLLM's do.
_TRITON_UTILS = """
import os
import types

_visible = os.environ.get("CUDA_VISIBLE_DEVICES")
HAS_TRITON = not (os.environ.get("@NO_DRIVER@") == "1"
                  and not (_visible is not None and not _visible.strip()))


def _cdiv(a, b):
    return -(-a // b)


class _Language(types.ModuleType):
    def __init__(self):
        super().__init__("triton.language")
        self.constexpr = lambda value: value
        self.int64 = self.int32 = self.float32 = self.bfloat16 = self.float16 = None


class _Triton(types.ModuleType):
    def __init__(self):
        super().__init__("triton")
        self.jit = lambda fn=None, **options: fn if fn is not None else (lambda f: f)
        self.cdiv = _cdiv
        self.language = _Language()


if HAS_TRITON:
    import triton
    import triton.language as tl
else:
    triton = _Triton()
    tl = triton.language
"""

# vLLM 0.33.0's quant_utils.py names and fields (GroupShape a NamedTuple of row, col; ScaleDesc;
# QuantKey) and its two block-FP8 keys.
_QUANT_UTILS = """
from dataclasses import dataclass as _dataclass
from typing import NamedTuple as _NamedTuple

import torch as _torch


class GroupShape(_NamedTuple):
    row: int
    col: int


@_dataclass(frozen=True)
class ScaleDesc:
    dtype: _torch.dtype
    static: bool
    group_shape: GroupShape


@_dataclass(frozen=True)
class QuantKey:
    dtype: _torch.dtype
    scale: ScaleDesc
    scale2: ScaleDesc | None = None
    symmetric: bool = True


kFp8Dynamic128Sym = QuantKey(_torch.float8_e4m3fn,
                             ScaleDesc(_torch.float32, False, GroupShape(1, 128)))
kFp8Static128BlockSym = QuantKey(_torch.float8_e4m3fn,
                                 ScaleDesc(_torch.float32, True, GroupShape(128, 128)))
"""

# vLLM 0.33.0's vllm/config: `VllmConfig()` infers the device type from the platform and raises
# "Failed to infer device type" where there is none (config/device.py); its kernel_config names
# the linear backend ("auto" by default); get_current_vllm_config raises outside
# set_current_vllm_config (config/vllm.py).
_CONFIG = """
import contextlib

_current = None


class KernelConfig:
    linear_backend = "auto"
    linear_backend_per_quant = None


class VllmConfig:
    def __init__(self, model_config=None):
        from vllm.platforms import current_platform

        if not current_platform.device_type:
            raise RuntimeError("Failed to infer device type (the stand-in sees no GPU)")
        self.model_config = model_config
        self.kernel_config = KernelConfig()


@contextlib.contextmanager
def set_current_vllm_config(vllm_config, check_compile=False, prefix=None):
    global _current
    old, _current = _current, vllm_config
    try:
        yield
    finally:
        _current = old


def get_current_vllm_config():
    if _current is None:
        raise AssertionError("Current vLLM config is not set.")
    return _current


def get_current_vllm_config_or_none():
    return _current
"""

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

_SCALED = "vllm.model_executor.kernels.linear.scaled_mm"

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
""".replace("@SCALED@", _SCALED)

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


def append(root: Path, module: str, text: str) -> None:
    """Add `text` to the stand-in module `module` under `root`: appended after what another
    piece of the stand-in wrote there, never written over it."""
    with module_path(root, module).open("a", encoding="utf-8") as out:
        out.write(text)


def add_selection(root: Path) -> None:
    """vLLM 0.33.0's platform, config, triton_utils and selection functions at its module paths
    with its signatures (platforms, config, triton_utils, utils/deep_gemm.py,
    kernels/linear/__init__.py, fused_moe/oracle/fp8.py), answering from the environment
    variables above; no vLLM code."""
    for module, text in (  # packages: their text goes in __init__.py
            ("vllm.platforms.__init__", _PLATFORMS),
            ("vllm.config.__init__", _CONFIG),
            ("vllm.triton_utils.__init__", _TRITON_UTILS),
            ("vllm.utils.deep_gemm", _DEEP_GEMM_UTILS),
            ("vllm.model_executor.layers.quantization.utils.humming.__init__",
             "\nfrom .priority import prefers_humming, prioritize_humming  # noqa: F401\n"),
            ("vllm.model_executor.layers.quantization.utils.humming.priority",
             _HUMMING_PRIORITY),
            ("vllm.model_executor.kernels.linear.__init__", _LINEAR),
            ("vllm.model_executor.layers.quantization.utils.quant_utils", _QUANT_UTILS),
            ("vllm.model_executor.layers.fused_moe.activation", _MOE_ACTIVATION),
            ("vllm.model_executor.layers.fused_moe.config", _MOE_CONFIG),
            ("vllm.model_executor.layers.fused_moe.oracle.fp8", _MOE_ORACLE)):
        append(root, module, _filled(text))


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
_DEEP_GEMM = _BLOCK + """
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

# vLLM 0.33.0's scaled_mm/flashinfer.py and utils/flashinfer.py: FlashInfer's block-scale GEMM
# runs on compute capability 90 only, with VLLM_BLOCKSCALE_FP8_GEMM_FLASHINFER (default 1) and
# FlashInfer's kernels usable, for bf16 input and output, fp8 weights, N % 64 == 0 and
# K % 128 == 0; FlashInfer DeepGEMM is the dynamic kernel of FlashInfer (base) and DeepGEMM
# (fallback).
_FLASHINFER = _BLOCK.replace("import Fp8BlockScaledMMLinearKernel", (
    "import (\n    Fp8BlockScaledDynamicMMLinearKernel,\n    Fp8BlockScaledMMLinearKernel,\n)")
) + """
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

# vLLM 0.33.0's scaled_mm/cutlass.py: CUTLASS's block-FP8 GEMM where vLLM's build supports the
# capability (its ops.cutlass_scaled_mm_supports_block_fp8: Hopper and later, so not sm89,
# where vLLM runs Marlin).
_CUTLASS = _BLOCK + """
from vllm.platforms import current_platform


class CutlassFp8BlockScaledMMKernel(Fp8BlockScaledMMLinearKernel):
    @classmethod
    def is_supported(cls, compute_capability=None):
        if not current_platform.is_cuda() or (compute_capability or 0) < 90:
            return False, f"has no block-FP8 GEMM for compute capability {compute_capability}"
        return True, None
"""

# vLLM 0.33.0's scaled_mm/b12x.py: the sm120 family only, with the b12x extra installed (not in
# the stand-in).
_B12X = _BLOCK + """
from vllm.platforms import current_platform


class B12xFp8BlockScaledMMKernel(Fp8BlockScaledMMLinearKernel):
    @classmethod
    def is_supported(cls, compute_capability=None):
        if not current_platform.is_device_capability_family(120):
            return False, "needs a Blackwell 12x GPU"
        return False, "needs the b12x extra, which is not installed"
"""

# vLLM 0.33.0's scaled_mm/triton.py and pytorch.py: Triton runs on any CUDA GPU; torch's
# block-wise scaled_mm only on compute capability 90.
_TRITON_KERNEL = _BLOCK + """
from vllm.platforms import current_platform


class TritonFp8BlockScaledMMKernel(Fp8BlockScaledMMLinearKernel):
    @classmethod
    def is_supported(cls, compute_capability=None):
        return (True, None) if current_platform.is_cuda() else (False, "needs CUDA")
"""

_TORCH_KERNEL = _BLOCK + """
from vllm.platforms import current_platform


class BlockWiseTorchFP8ScaledMMLinearKernel(Fp8BlockScaledMMLinearKernel):
    @classmethod
    def is_supported(cls, compute_capability=None):
        if not current_platform.is_cuda() or compute_capability != 90:
            return False, "needs compute capability 90 for 1x128 and 128x128 block scales"
        return True, None
"""

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
    for module, text in (("ScaledMMLinearKernel", _SCALED_MM_BASE),
                         ("BlockScaledMMLinearKernel", _BLOCK_BASE),
                         ("deep_gemm", _DEEP_GEMM), ("flashinfer", _FLASHINFER),
                         ("cutlass", _CUTLASS), ("b12x", _B12X), ("triton", _TRITON_KERNEL),
                         ("pytorch", _TORCH_KERNEL), ("marlin", _MARLIN),
                         ("humming", _HUMMING)):
        append(root, f"{_SCALED}.{module}", _filled(text.replace("@SCALED@", _SCALED)))
    # vLLM 0.33.0's scaled_mm/__init__.py re-exports these (Humming it does not).
    append(root, f"{_SCALED}.__init__",
           f"\nfrom {_SCALED}.ScaledMMLinearKernel import (\n"
           "    FP8ScaledMMLinearKernel,\n    FP8ScaledMMLinearLayerConfig,\n)\n"
           f"from {_SCALED}.marlin import MarlinFP8ScaledMMLinearKernel\n")
