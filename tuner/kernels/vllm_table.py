"""The tuner's table of vLLM's block-FP8 linear kernels: which one vLLM runs per GPU
architecture and weight shape, as known here without asking vLLM, and the flag that makes it
run the Triton kernel that reads the tuned files. Pure facts; nothing here imports vLLM.

Source: vLLM 0.33.0, `vllm/model_executor/kernels/linear/__init__.py`
(`_POSSIBLE_FP8_BLOCK_KERNELS[CUDA]`, reordered by `_resolve_backend_kernels`, then walked in
order by `choose_scaled_mm_linear_kernel`), and each kernel's `is_supported`/`can_implement` in
`vllm/model_executor/kernels/linear/scaled_mm/`. Other vLLM versions may order the kernels
differently.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The vLLM release this table (and every fact marked "vLLM 0.33.0") describes.
VLLM_VERSION = "0.33.0"

# `_POSSIBLE_FP8_BLOCK_KERNELS[CUDA]` of vLLM 0.33.0, as listed (before any reordering):
# (class name, label). The class names are the wheel's (kernels/linear/scaled_mm/*.py).
FP8_BLOCK_KERNELS: tuple[tuple[str, str], ...] = (
    (
        "FlashInferFp8DeepGEMMDynamicBlockScaledKernel",
        "FlashInfer DeepGEMM (FlashInfer below M = 32, DeepGEMM from 32)",
    ),
    ("DeepGemmFp8BlockScaledMMKernel", "DeepGEMM"),
    ("CutlassFp8BlockScaledMMKernel", "CUTLASS"),
    ("B12xFp8BlockScaledMMKernel", "B12x"),
    ("MarlinFP8ScaledMMLinearKernel", "Marlin (weight-only FP8, W8A16)"),
    ("HummingFP8ScaledMMLinearKernel", "Humming"),
    ("TritonFp8BlockScaledMMKernel", "Triton (reads the tuned files)"),
    ("BlockWiseTorchFP8ScaledMMLinearKernel", "torch scaled_mm"),
)
TRITON_KERNEL = "TritonFp8BlockScaledMMKernel"
DEEPGEMM = "DeepGemmFp8BlockScaledMMKernel"
CUTLASS = "CutlassFp8BlockScaledMMKernel"
MARLIN = "MarlinFP8ScaledMMLinearKernel"
# vLLM 0.33.0, vllm/utils/deep_gemm.py `_DEEPGEMM_BLACKWELL_EXCLUDED_MODEL_TYPES`: model types
# DeepGEMM is turned off for, per Blackwell family (compute capability // 10 * 10).
DEEPGEMM_OFF_ON_BLACKWELL: dict[str, tuple[int, ...]] = {
    "qwen3_5_text": (100, 120),
    "qwen3_5_moe_text": (100, 120),
    "kolibri1": (120,),
}


def deepgemm_refusal(
    capability: int, N: int, K: int, out_dtype: str, model_type: str | None
) -> str:
    """Why vLLM 0.33.0's DeepGEMM linear kernel cannot take a block-FP8 layer on a compute
    capability; "" when it can. Its checks (kernels/linear/scaled_mm/deep_gemm.py, utils/
    deep_gemm.py): a Hopper (90) or Blackwell (100, 120 families) GPU, bf16 output,
    N % 64 == 0, K % 128 == 0, and a model type not turned off on that Blackwell family
    (`DEEPGEMM_OFF_ON_BLACKWELL`). What it cannot see from here: VLLM_USE_DEEP_GEMM=0 and the
    deep_gemm package (the wheel ships one).

    Args:
        capability: e.g. 90.
        N, K: the weight [N, K].
        out_dtype: "bfloat16" or "float16".
        model_type: the model's Hugging Face model type; None when not known.
    """
    family = capability // 10 * 10
    if capability != 90 and family not in (100, 120):
        return "DeepGEMM runs on Hopper (sm90) and Blackwell only"
    if out_dtype != "bfloat16":
        return "DeepGEMM writes only bfloat16"
    if N % 64 or K % 128:
        return f"DeepGEMM needs N % 64 == 0 and K % 128 == 0 (N={N}, K={K})"
    if family in DEEPGEMM_OFF_ON_BLACKWELL.get(model_type or "", ()):
        return f"vLLM turns DeepGEMM off for model type {model_type} on sm{family}"
    return ""


def table_dense_kernel(
    capability: int, N: int, K: int, out_dtype: str, model_type: str | None
) -> str | None:
    """The block-FP8 linear kernel class vLLM 0.33.0 selects by default for weight [N, K], as
    this table knows it without asking vLLM: Marlin on sm89; DeepGEMM on sm90 and Blackwell
    where `deepgemm_refusal` finds nothing, else CUTLASS (sm90, sm100 family). On sm90 a server
    whose FlashInfer kernels are usable (flashinfer-cubin installed, or nvcc and ninja) runs
    FlashInfer DeepGEMM instead of DeepGEMM (utils/flashinfer.py: its block-scale GEMM is
    sm90-only); the table cannot see that and names DeepGEMM, which FlashInfer DeepGEMM runs
    from M = 32.

    Returns:
        The class name; None where the table does not know (sm120 without DeepGEMM: CUTLASS or
        B12x; architectures without an FP8 dot).
    """
    if capability == 89:
        return MARLIN
    if capability != 90 and capability // 10 * 10 not in (100, 120):
        return None
    if not deepgemm_refusal(capability, N, K, out_dtype, model_type):
        return DEEPGEMM
    return CUTLASS if capability == 90 or capability // 10 * 10 == 100 else None


TRITON_FLAG = "--linear-backend triton"


@dataclass(frozen=True)
class ArchBackend:
    """vLLM's default block-FP8 linear kernel on one architecture family.

    Attributes:
        arch: e.g. "sm89".
        gpus: example GPUs, e.g. "L20, L40S, RTX 4090".
        default: the kernel vLLM picks with default settings.
        note: one more fact (what runs when the default is disabled, what it needs); "" if none.
    """

    arch: str
    gpus: str
    default: str
    note: str = ""


# vLLM 0.33.0 (the kernels' is_supported/can_implement in kernels/linear/scaled_mm/): sm89 runs
# Marlin (FlashInfer's block-scale GEMM and DeepGEMM need sm90 or Blackwell, CUTLASS's block-FP8
# GEMM Hopper or later), and Humming when Marlin is disabled; sm90 runs FlashInfer DeepGEMM
# where FlashInfer's kernels are usable, else DeepGEMM, and CUTLASS where DeepGEMM cannot take
# the layer (`deepgemm_refusal`); Blackwell runs DeepGEMM, else CUTLASS or B12x.
ARCH_BACKENDS: tuple[ArchBackend, ...] = (
    ArchBackend(
        "sm89",
        "L20, L40S, RTX 4090",
        "Marlin (weight-only FP8, W8A16)",
        "with Marlin disabled Humming runs, so disabling Marlin alone is not enough",
    ),
    ArchBackend(
        "sm90",
        "H100, H200, H20",
        "DeepGEMM (FlashInfer DeepGEMM where FlashInfer's kernels are installed or can "
        "be built), or CUTLASS where DeepGEMM cannot run",
        "DeepGEMM needs bf16 output, N % 64 == 0 and K % 128 == 0; FlashInfer DeepGEMM "
        "runs FlashInfer below M = 32 and DeepGEMM from 32",
    ),
    ArchBackend(
        "sm100/sm120",
        "B200, RTX 5090",
        "DeepGEMM, or CUTLASS or B12x where DeepGEMM cannot run",
        "DeepGEMM needs bf16 output, N % 64 == 0 and K % 128 == 0, and vLLM turns it "
        "off for some model types (qwen3_5_text and qwen3_5_moe_text; kolibri1 on "
        "sm120)",
    ),
)


def capability_number(compute_capability: str | None) -> int | None:
    """The compute capability as vLLM's int: 89 for "8.9", 90 for "9.0" or "sm90", 120 for
    "12.0"; None for "" (the interpreter), None or an unreadable value. The one parser of a
    compute capability."""
    text = (compute_capability or "").strip()
    match = re.fullmatch(r"(\d{1,2})\.(\d)", text) or re.fullmatch(r"sm(\d{1,2})(\d)", text)
    return int(match[1]) * 10 + int(match[2]) if match else None


def capability_text(capability: int) -> str:
    """ "8.9" for 89, as torch and the store write a compute capability."""
    return f"{capability // 10}.{capability % 10}"


def arch_of(compute_capability: str | None) -> str | None:
    """The ARCH_BACKENDS family of a compute capability such as "8.9" or "sm89"; None when
    unknown or older than sm89 (no FP8 dot: our kernel cannot run there)."""
    capability = capability_number(compute_capability)
    if capability is None or capability < 89:
        return None
    return "sm89" if capability < 90 else "sm90" if capability < 100 else "sm100/sm120"
