"""What `tuner doctor` and vLLM's selection probe say of a kernel family, as the family's own
hooks (`tuner.kernels.family.VllmServing`) take and give it: the model asked about
(`ModelAsked`), vLLM's answer (`Answer`), the question a family's advice answers (`Asked`), the
lines it adds (`Diagnosis`), the words doctor's lines share, and vLLM's description of a
block-FP8 linear layer (`block_fp8_layer_config`, which `tuner compare` takes too). The generic
doctor and selection code is `tuner.compare.doctor` and `tuner.compare.vllm_select`; each
family's hooks live in its own folder. Importable without torch, triton or vLLM.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from tuner.kernels.vllm_table import VLLM_VERSION, ArchBackend

TABLE = f"the tuner's table of vLLM {VLLM_VERSION}"
OWN = "vLLM's own selection code"


@dataclass(frozen=True)
class ModelAsked:
    """The model vLLM's selection is asked about.

    Attributes:
        label: how lines name it, e.g. "deepseek-v3 TP 8".
        model_type: its Hugging Face model type (e.g. "deepseek_v3"); None when not known.
        dense: (N, K) of its block-FP8 linear weights.
        moe: (E, N, K, top_k) of its fused-MoE experts (N per rank, K the hidden size), or None.
        given: the user named it (--model); False for `DEFAULT_MODEL`.
    """

    label: str
    model_type: str | None
    dense: tuple[tuple[int, int], ...]
    moe: tuple[int, int, int, int] | None
    given: bool = True

    def to_json(self) -> str:
        """The model as one JSON text (`from_json` reads it back)."""
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ModelAsked:
        """The model `to_json` wrote (its JSON lists read back as tuples)."""
        return cls(**{name: _tuples(value) for name, value in json.loads(text).items()})

    @classmethod
    def of(cls, shapes) -> ModelAsked:
        """The model of a `tuner.inputs.shapes.ModelShapes` (its first MoE shape, if any)."""
        return cls(
            f"{shapes.model} TP {shapes.tp}",
            shapes.model_type,
            tuple(shapes.shapes),
            tuple(shapes.moe[0]) if shapes.moe else None,
        )


def _tuples(value: Any) -> Any:
    """`value` with every JSON list in it turned into a tuple."""
    return tuple(_tuples(item) for item in value) if isinstance(value, list) else value


# Without --model: one DeepSeek-V3 layer (shapes/deepseek-v3.toml: model_type deepseek_v3, a
# dense weight N x K at TP 1, the routed experts E, N = moe_intermediate_size, hidden, top_k).
DEFAULT_DENSE = ((7168, 18432),)
DEFAULT_MOE = (256, 2048, 7168, 8)
DEFAULT_MODEL = ModelAsked(
    "one DeepSeek-V3 layer", "deepseek_v3", DEFAULT_DENSE, DEFAULT_MOE, given=False
)


@dataclass(frozen=True)
class Answer:
    """One family's answer from vLLM's selection code.

    Attributes:
        kernel: the kernel class ("DeepGemmFp8BlockScaledMMKernel") or MoE backend ("TRITON");
            for dense layers the one chosen for most of the model's shapes; None when vLLM's
            code was not asked or failed.
        detail: more of vLLM's answer: the MoE experts class, or the kernels it tried before
            the dense one (in its order) with its reasons for passing them over; "" when none.
        reason: why the tuner's table answers instead, one line; "" when vLLM answered.
        others: the shapes for which vLLM chose another dense kernel, e.g.
            "CutlassFp8BlockScaledMMKernel for N=576,K=256"; "" when none.
    """

    kernel: str | None
    detail: str = ""
    reason: str = ""
    others: str = ""


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
    """What a family's doctor advice (`VllmServing.advice`) is asked about.

    Attributes:
        arch: "sm90", ...: the architecture doctor answers for.
        capability: the same as an int, e.g. 90.
        table_arch: its key in the tuner's table of vLLM's backends (`arch_of`), e.g.
            "sm100/sm120".
        table: that row of the table (`tuner.kernels.vllm_table.ARCH_BACKENDS`).
        model: the model vLLM serves (--model), None when not given.
        linear_backend_triton: the server runs with `--linear-backend triton`.
    """

    arch: str
    capability: int
    table_arch: str
    table: ArchBackend
    model: ModelAsked | None
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


def same_code(ours: Any, theirs: Any) -> list[str]:
    """What differs between two binaries (`tuner.kernels.target.Compiled`), one phrase each;
    [] when shared memory, registers, spills and the PTX mix all agree."""
    differ = [
        f"{label} {getattr(ours, name)} vs {getattr(theirs, name)}{unit}"
        for label, name, unit in (
            ("shared memory", "shared", " bytes"),
            ("registers", "n_regs", ""),
            ("spills", "spill_bytes", " bytes"),
        )
        if getattr(ours, name) != getattr(theirs, name)
    ]
    delta = {op for op in ours.opcodes | theirs.opcodes if ours.opcodes[op] != theirs.opcodes[op]}
    if delta:
        differ.append(
            f"PTX mix: {len(delta)} opcode(s) differ ({ours.instructions} vs "
            f"{theirs.instructions} instructions)"
        )
    return differ
