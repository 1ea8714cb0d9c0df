"""A stand-in vLLM for tests: a package in a temporary folder with vLLM 0.33.0's module paths and
distribution metadata, whose Triton kernels are new @triton.jit functions that call the
project's own kernels (dense) or are their text renamed (fused MoE), so their source text, and
hash, is their own, and whose launchers take vLLM's arguments. No vLLM code: only its module
paths, names and call signatures (facts from vLLM 0.33.0's fp8_utils.py and fused_moe.py)."""

from __future__ import annotations

import inspect
import textwrap
from pathlib import Path

from tuner.kernels.dense.family import VLLM_DENSE
from tuner.kernels.moe.family import VLLM_MOE

VERSION = "0.33.0"


def _delegate(name: str, ours: str, module: str) -> str:
    """A @triton.jit `name` with the parameters of our kernel `module.ours` that calls it."""
    import importlib

    fn = getattr(importlib.import_module(module), ours).fn
    params = list(inspect.signature(fn).parameters.values())
    constexpr = [p.name for p in params if "constexpr" in str(p.annotation)]
    header = ",\n    ".join(f"{p.name}: tl.constexpr" if p.name in constexpr else p.name
                           for p in params)
    call = ", ".join(p.name for p in params)
    return (f"@triton.jit\ndef {name}(\n    {header},\n):\n    _{ours}({call})\n")


def _renamed_copy(name: str, ours: str, module: str) -> str:
    """Our kernel `module.ours`'s own text under the name `name`: a Triton kernel whose compiled
    code is ours (a delegating wrapper's is not quite: the fused-MoE one's PTX differs in two
    comparison opcodes) and whose source text, and hash, is its own."""
    import importlib

    fn = getattr(importlib.import_module(module), ours).fn
    text = textwrap.dedent(inspect.getsource(fn))
    return text.replace(f"def {ours}(", f"def {name}(", 1)


def _path(root: Path, module: str) -> Path:
    path = root.joinpath(*module.split(".")).with_suffix(".py")
    for folder in [path.parent, *path.parent.parents]:
        if folder == root:
            break
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "__init__.py").touch()
    return path


def build_standin(root: Path, version: str = VERSION, *, triton_pin: str = "3.8.0") -> Path:
    """Write the stand-in under `root` (put `root` on PYTHONPATH to import it).

    Args:
        root: an empty folder.
        version: the version its metadata and `__version__` give.
        triton_pin: the Triton its metadata says torch needs (as a `Requires-Dist`).

    Returns:
        root.
    """
    root.mkdir(parents=True, exist_ok=True)
    info = root / f"vllm-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n"
        f"Requires-Dist: torch==2.14.0\nRequires-Dist: triton=={triton_pin}\n")
    (info / "RECORD").write_text("")
    dense = _path(root, VLLM_DENSE.module)
    dense.write_text(
        '"""Stand-in of vLLM\'s fp8_utils: its dense kernel calls the project\'s own."""\n'
        "import triton\nimport triton.language as tl\n\n"
        "from tuner.kernels.dense.kernel import w8a8_block_fp8_matmul_kernel as "
        "_w8a8_block_fp8_matmul_kernel\n\n\n"
        + _delegate(VLLM_DENSE.function, "w8a8_block_fp8_matmul_kernel",
                    "tuner.kernels.dense.kernel"))
    moe = _path(root, VLLM_MOE.module)
    moe.write_text(
        '"""Stand-in of vLLM\'s fused_moe: its kernel is the project\'s own, renamed; the '
        'dispatcher takes vLLM\'s arguments."""\n'
        "import triton\nimport triton.language as tl\n\n"
        "from tuner.kernels.moe.kernel import invoke_moe_gemm\n"
        "\nCALLS = []\n\n\n"
        + _renamed_copy(VLLM_MOE.function, "fused_moe_fp8_block_kernel",
                        "tuner.kernels.moe.kernel")
        + "\n\ndef dispatch_fused_moe_kernel(A, B, C, A_scale, B_scale, B_zp, topk_weights,\n"
        "        sorted_token_ids, expert_ids, num_tokens_post_padded, mul_routed_weight, top_k,\n"
        "        config, compute_type, use_fp8_w8a8, use_int8_w8a8, use_int8_w8a16,\n"
        "        use_int4_w4a16, per_channel_quant, block_shape=None, B_bias=None):\n"
        "    assert use_fp8_w8a8 and B_zp is None and B_bias is None and C.dim() == 3\n"
        "    CALLS.append((tuple(C.shape), top_k, mul_routed_weight))\n"
        "    invoke_moe_gemm(A, A_scale, B, B_scale, C, topk_weights, sorted_token_ids,\n"
        "                    expert_ids, num_tokens_post_padded,\n"
        "                    mul_routed_weight=mul_routed_weight, top_k=top_k, config=config,\n"
        "                    block_shape=tuple(block_shape), kernel=fused_moe_kernel)\n")
    (root / "vllm" / "__init__.py").write_text(f'__version__ = "{version}"\n')
    _add_selection(root)
    return root


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

_QUANT_UTILS = '''
from dataclasses import dataclass
from typing import NamedTuple


class GroupShape(NamedTuple):
    row: int
    col: int


@dataclass(frozen=True)
class ScaleDesc:
    dtype: object
    static: bool
    group_shape: GroupShape


@dataclass(frozen=True)
class QuantKey:
    dtype: object
    scale: ScaleDesc
    scale2: ScaleDesc | None = None
    symmetric: bool = True


kFp8Dynamic128Sym = QuantKey("fp8", ScaleDesc("float32", False, GroupShape(1, 128)))
kFp8Static128BlockSym = QuantKey("fp8", ScaleDesc("float32", True, GroupShape(128, 128)))
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
from dataclasses import dataclass as _dataclass

from vllm.config import get_current_vllm_config as _get_current_vllm_config
from vllm.platforms import PlatformEnum as _PlatformEnum


@_dataclass
class FP8ScaledMMLinearLayerConfig:
    weight_quant_key: object
    activation_quant_key: object
    weight_shape: tuple
    input_dtype: object
    out_dtype: object


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


def _append(path: Path, text: str) -> None:
    """Add `text` to a stand-in module, after what another piece of the stand-in wrote there."""
    with path.open("a", encoding="utf-8") as module:
        module.write(text)


def _add_selection(root: Path) -> None:
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
        _append(_path(root, module), text)
