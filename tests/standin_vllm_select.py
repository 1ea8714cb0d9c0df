"""The stand-in vLLM's block-FP8 linear kernel classes (`tests.standin_vllm`): vLLM 0.33.0's
`FP8ScaledMMLinearKernel` base and Marlin, which `tuner compare` times through vLLM's own class,
at vLLM's module paths with its names and signatures; Marlin computes with torch. No vLLM
code."""

from __future__ import annotations

from pathlib import Path

from tests.standin_vllm_parts import SCALED_MM, append

# Every class in ScaledMMLinearKernel.py; each of vLLM's modules re-exports its own.
_KERNELS = """
from types import SimpleNamespace

import torch

from vllm.platforms import current_platform

PROCESSED = []
APPLIED = []


class FP8ScaledMMLinearLayerConfig(SimpleNamespace):  # weight_shape, out_dtype, ...
    pass


class FP8ScaledMMLinearKernel:
    def __init__(self, c, layer_param_names):
        assert self.is_supported()[0]
        self.config, self.layer_param_names = c, layer_param_names

    @classmethod
    def is_supported(cls, compute_capability=None):
        return (True, None) if current_platform.is_cuda() else (False, "needs CUDA")


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


def add_selection(root: Path) -> None:
    """The kernel classes at vLLM 0.33.0's module paths (kernels/linear/scaled_mm/*.py)."""
    append(root, f"{SCALED_MM}.ScaledMMLinearKernel", _KERNELS)
    names = "MarlinFP8ScaledMMLinearKernel, PROCESSED, APPLIED"
    append(root, f"{SCALED_MM}.marlin", f"from .ScaledMMLinearKernel import {names}  # noqa\n")
