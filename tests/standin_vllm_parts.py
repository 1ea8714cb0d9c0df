"""The parts of the stand-in vLLM (`tests.standin_vllm`) that `tuner doctor` and `tuner compare`
reach: vLLM 0.33.0's kernel-selection functions and its FP8 scaled-mm kernel classes, at its
module paths with its names and signatures, answering what the tests set. No vLLM code."""

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


# What the stand-in's selection functions answer, read when they are called (so a test sets them
# in the environment of the `tuner doctor` it runs): the compute capability vLLM "sees" ("9.0";
# unset: no CUDA GPU), the dense kernel class and the MoE backend; "raise:<text>" makes the
# function raise RuntimeError(<text>).
CAPABILITY_VARIABLE = "STANDIN_VLLM_CAPABILITY"
DENSE_VARIABLE = "STANDIN_VLLM_DENSE_KERNEL"
MOE_VARIABLE = "STANDIN_VLLM_MOE_BACKEND"

_PLATFORMS = f'''
import enum
import os
from typing import NamedTuple


class PlatformEnum(enum.Enum):
    CUDA = enum.auto()
    CPU = enum.auto()


class DeviceCapability(NamedTuple):
    major: int
    minor: int


class _Platform:
    def is_cuda(self):
        return bool(os.environ.get("{CAPABILITY_VARIABLE}"))

    def get_device_capability(self, device_id=0):
        seen = os.environ.get("{CAPABILITY_VARIABLE}")
        return DeviceCapability(*map(int, seen.split("."))) if seen else None


current_platform = _Platform()
'''

# vLLM 0.33.0's quant_utils.py names and fields (GroupShape a NamedTuple of row, col; ScaleDesc;
# QuantKey) and its two block-FP8 keys.
_QUANT_UTILS = '''
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
'''

# vLLM 0.33.0's vllm/config/vllm.py: get_current_vllm_config raises outside
# set_current_vllm_config; the stand-in's selection functions call it as vLLM's do.
_CONFIG = '''
import contextlib

_current = None


class VllmConfig:
    model_config = None


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
'''

_LINEAR = f'''
import os as _os

from vllm.config import get_current_vllm_config as _get_current_vllm_config
from vllm.platforms import PlatformEnum as _PlatformEnum
from vllm.model_executor.kernels.linear.scaled_mm import (  # noqa: F401
    FP8ScaledMMLinearLayerConfig,
    MarlinFP8ScaledMMLinearKernel,
)


def _standin_kernel(name):
    return globals().get(name) or type(name, (), {{}})


_POSSIBLE_FP8_BLOCK_KERNELS = {{_PlatformEnum.CUDA: [_standin_kernel(name) for name in (
    "DeepGemmFp8BlockScaledMMKernel", "CutlassFp8BlockScaledMMKernel",
    "MarlinFP8ScaledMMLinearKernel", "TritonFp8BlockScaledMMKernel")]}}


def is_supported_and_can_implement_kernel(kernel, config, compute_capability):
    return False, f"{{kernel.__name__}} is passed over by the stand-in."


def choose_scaled_mm_linear_kernel(config, possible_kernels, compute_capability=None,
                                   force_kernel=None, *, quantization):
    assert quantization == "fp8_block_w8a8" and config.weight_shape[1] % 128 == 0
    _get_current_vllm_config()
    answer = _os.environ.get("{DENSE_VARIABLE}", "TritonFp8BlockScaledMMKernel")
    if answer.startswith("raise:"):
        raise RuntimeError(answer.removeprefix("raise:"))
    for kernel in possible_kernels[_PlatformEnum.CUDA]:
        if kernel.__name__ == answer:
            return kernel
    return _standin_kernel(answer)
'''

_MOE_ACTIVATION = '''
from enum import Enum


class MoEActivation(Enum):
    SILU = "silu"
'''

_MOE_CONFIG = '''
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
'''

_MOE_ORACLE = f'''
import os
from enum import Enum

from vllm.config import get_current_vllm_config


class Fp8MoeBackend(Enum):
    DEEPGEMM = "DEEPGEMM"
    FLASHINFER_CUTLASS = "FLASHINFER_CUTLASS"
    TRITON = "TRITON"
    MARLIN = "MARLIN"


class TritonExperts:
    pass


def select_fp8_moe_backend(config, weight_key, activation_key, allow_vllm_cutlass=False):
    assert config.moe_parallel_config.ep_size == 1 and not allow_vllm_cutlass
    get_current_vllm_config()
    answer = os.environ.get("{MOE_VARIABLE}", "TRITON")
    if answer.startswith("raise:"):
        raise RuntimeError(answer.removeprefix("raise:"))
    return Fp8MoeBackend(answer), TritonExperts if answer == "TRITON" else None
'''


def append(root: Path, module: str, text: str) -> None:
    """Add `text` to the stand-in module `module` under `root`: appended after what another
    piece of the stand-in wrote there, never written over it."""
    with module_path(root, module).open("a", encoding="utf-8") as out:
        out.write(text)


def add_selection(root: Path) -> None:
    """vLLM 0.33.0's selection functions at its module paths with its signatures
    (kernels/linear/__init__.py, fused_moe/oracle/fp8.py, platforms), answering what the
    environment variables above say; no vLLM code."""
    for module, text in (  # packages: their text goes in __init__.py
            ("vllm.platforms.__init__", _PLATFORMS),
            ("vllm.config.__init__", _CONFIG),
            ("vllm.model_executor.kernels.linear.__init__", _LINEAR),
            ("vllm.model_executor.layers.quantization.utils.quant_utils", _QUANT_UTILS),
            ("vllm.model_executor.layers.fused_moe.activation", _MOE_ACTIVATION),
            ("vllm.model_executor.layers.fused_moe.config", _MOE_CONFIG),
            ("vllm.model_executor.layers.fused_moe.oracle.fp8", _MOE_ORACLE)):
        append(root, module, text)


# vLLM 0.33.0's ScaledMMLinearKernel.py: the layer config's fields, the kernel's constructor.
_SCALED_MM_BASE = '''
"""Stand-in of vLLM's ScaledMMLinearKernel: the FP8 layer config and kernel base."""
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
'''

# MarlinFP8ScaledMMLinearKernel with vLLM 0.33.0's signatures; its "repacking" stores the
# dequantized weight as [K, N] float32, so a caller that skipped processing gets a wrong
# product. PROCESSED and APPLIED count the calls.
_MARLIN = '''
"""Stand-in of vLLM's Marlin FP8 kernel class: weight-only, computed with torch."""
import torch as _torch

from vllm.model_executor.kernels.linear.scaled_mm.ScaledMMLinearKernel import (
    FP8ScaledMMLinearKernel,
)

PROCESSED = []
APPLIED = []


class MarlinFP8ScaledMMLinearKernel(FP8ScaledMMLinearKernel):
    @classmethod
    def is_supported(cls, compute_capability=None):
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
'''

# HummingFP8ScaledMMLinearKernel as on a machine without Humming (vLLM 0.33.0's reason).
_HUMMING = '''
"""Stand-in of vLLM's Humming FP8 kernel class, Humming not installed."""
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
'''


def add_linear_kernels(root: Path) -> None:
    """vLLM's FP8 scaled-mm kernel classes that `tuner compare` builds (Marlin, Humming), at
    vLLM 0.33.0's module paths, with its class names and method signatures; torch computes."""
    linear = "vllm.model_executor.kernels.linear.scaled_mm"
    append(root, f"{linear}.ScaledMMLinearKernel", _SCALED_MM_BASE)
    append(root, f"{linear}.marlin", _MARLIN)
    append(root, f"{linear}.humming", _HUMMING)
    # vLLM 0.33.0's scaled_mm/__init__.py re-exports these (Humming it does not).
    append(root, f"{linear}.__init__",
           f"\nfrom {linear}.ScaledMMLinearKernel import (\n"
           "    FP8ScaledMMLinearKernel,\n    FP8ScaledMMLinearLayerConfig,\n)\n"
           f"from {linear}.marlin import MarlinFP8ScaledMMLinearKernel\n")
