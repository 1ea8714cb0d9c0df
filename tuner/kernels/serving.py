"""What `tuner doctor` says of a kernel family, as the family's own hook
(`tuner.kernels.family.KernelFamily.advice`) takes and gives it: the question a family's advice
answers (`Asked`), the lines it adds (`Diagnosis`), the words doctor's lines share, and vLLM's
description of a block-FP8 linear layer (`block_fp8_layer_config`, which `tuner compare`
takes). The generic doctor code is `tuner.cli.doctor`; each family's hook lives in its own
folder. Importable without torch, triton or vLLM.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

from tuner.kernels.vllm_table import VLLM_VERSION, ArchBackend

TABLE = f"the tuner's table of vLLM {VLLM_VERSION}"


@dataclass
class Diagnosis:
    """What `tuner doctor` prints and why it exits as it does.

    Attributes:
        lines: the screen, one finding a line.
        reasons: why tuning here will not change what vLLM runs; [] exits 0.
        helps: the families whose tuned files vLLM will read.
    """

    lines: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    helps: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Asked:
    """What a family's doctor advice (`KernelFamily.advice`) is asked about.

    Attributes:
        arch: "sm90", ...: the architecture doctor answers for.
        capability: the same as an int, e.g. 90.
        table_arch: its key in the tuner's table of vLLM's backends (`arch_of`), e.g.
            "sm100/sm120".
        table: that row of the table (`tuner.kernels.vllm_table.ARCH_BACKENDS`).
        model: the `tuner.inputs.shapes.ModelShapes` vLLM serves (--model); None when not
            given.
        linear_backend_triton: the server runs with `--linear-backend triton`.
    """

    arch: str
    capability: int
    table_arch: str
    table: ArchBackend
    model: Any
    linear_backend_triton: bool


def block_fp8_layer_config(N: int, K: int, dtype) -> Any:
    """vLLM's description of a block-FP8 linear layer, as `init_fp8_linear_kernel` makes it
    (vLLM 0.33.0, kernels/linear/__init__.py): `FP8ScaledMMLinearLayerConfig`
    (kernels/linear/scaled_mm/ScaledMMLinearKernel.py) of weight [N, K] with 128x128 static FP8
    blocks (`kFp8Static128BlockSym`), activations in dynamic 1x128 groups (`kFp8Dynamic128Sym`,
    layers/quantization/utils/quant_utils.py), input and output in `dtype` (a torch dtype).
    What vLLM's selection and its linear-kernel classes take; vLLM is imported when called.

    Raises:
        Exception: whatever importing vLLM's config class or keys raises.
    """
    keys = importlib.import_module("vllm.model_executor.layers.quantization.utils.quant_utils")
    scaled_mm = "vllm.model_executor.kernels.linear.scaled_mm.ScaledMMLinearKernel"
    return importlib.import_module(scaled_mm).FP8ScaledMMLinearLayerConfig(
        weight_quant_key=keys.kFp8Static128BlockSym,
        activation_quant_key=keys.kFp8Dynamic128Sym,
        weight_shape=(N, K),
        input_dtype=dtype,
        out_dtype=dtype,
    )
