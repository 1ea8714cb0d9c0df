"""A stand-in vLLM for tests: a package in a temporary folder with vLLM 0.33.0's module paths and
distribution metadata, whose Triton kernels are new @triton.jit functions that call the
project's own kernels (so their source text, and hash, is their own) and whose launchers take
vLLM's arguments. No vLLM code: only its module paths, names and call signatures (facts from
vLLM 0.33.0's fp8_utils.py and fused_moe.py)."""

from __future__ import annotations

import inspect
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
        '"""Stand-in of vLLM\'s fused_moe: its kernel calls the project\'s own; the dispatcher '
        'takes vLLM\'s arguments."""\n'
        "import triton\nimport triton.language as tl\n\n"
        "from tuner.kernels.moe.kernel import fused_moe_fp8_block_kernel as "
        "_fused_moe_fp8_block_kernel\nfrom tuner.kernels.moe.kernel import invoke_moe_gemm\n"
        "\nCALLS = []\n\n\n"
        + _delegate(VLLM_MOE.function, "fused_moe_fp8_block_kernel", "tuner.kernels.moe.kernel")
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
    _add_linear_kernels(root)
    (root / "vllm" / "__init__.py").write_text(f'__version__ = "{version}"\n')
    return root


def _append(root: Path, module: str, text: str) -> None:
    """Add `text` to the stand-in module `module`: appended when another part of the stand-in
    already wrote that file, never written over it."""
    path = _path(root, module)
    with path.open("a", encoding="utf-8") as out:
        out.write(text)


# vLLM 0.33.0's quant_utils.py names and fields (GroupShape row/col, ScaleDesc, QuantKey).
_QUANT_UTILS = '''
"""Stand-in of vLLM's quant_utils: the quant keys of block-FP8 layers."""
from dataclasses import dataclass as _dataclass

import torch as _torch


@_dataclass(frozen=True)
class GroupShape:
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


def _add_linear_kernels(root: Path) -> None:
    """vLLM's FP8 scaled-mm kernel classes that `tuner compare` builds (Marlin, Humming), at
    vLLM 0.33.0's module paths, with its class names and method signatures; torch computes."""
    linear = "vllm.model_executor.kernels.linear.scaled_mm"
    _append(root, "vllm.model_executor.layers.quantization.utils.quant_utils", _QUANT_UTILS)
    _append(root, f"{linear}.ScaledMMLinearKernel", _SCALED_MM_BASE)
    _append(root, f"{linear}.marlin", _MARLIN)
    _append(root, f"{linear}.humming", _HUMMING)
    # vLLM 0.33.0's scaled_mm/__init__.py re-exports these (Humming it does not).
    _append(root, f"{linear}.__init__",
            f"\nfrom {linear}.ScaledMMLinearKernel import (\n"
            "    FP8ScaledMMLinearKernel,\n    FP8ScaledMMLinearLayerConfig,\n)\n"
            f"from {linear}.marlin import MarlinFP8ScaledMMLinearKernel\n")
