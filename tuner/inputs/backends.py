"""Which kernel vLLM runs for block-FP8 linear layers, per GPU architecture, and what makes it run
the Triton kernel that reads our files. Pure facts and text; nothing here imports vLLM.

Source: vLLM 0.33.0, `vllm/model_executor/kernels/linear/__init__.py`
(`_POSSIBLE_FP8_BLOCK_KERNELS[CUDA]`, reordered by `_resolve_backend_kernels`, then walked in
order by `choose_scaled_mm_linear_kernel`, which logs `Selected <kernel class> for <layer
method>` once per process), and each kernel's `is_supported`/`can_implement` in
`vllm/model_executor/kernels/linear/scaled_mm/`. Other vLLM versions may order the kernels
differently.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

VLLM_VERSION = "0.33.0"
# What vLLM 0.33.0 runs with, from its wheel's METADATA (`Requires-Dist: torch==2.14.0`) and
# torch 2.14.0's wheel METADATA (`Requires-Dist: triton~=3.8.0`): the Triton its kernels, and
# so the tuned files, are compiled with in the serving image.
VLLM_TORCH_PIN = "==2.14.0"
VLLM_TRITON_PIN = "~=3.8.0"

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
FLASHINFER_DEEPGEMM = "FlashInferFp8DeepGEMMDynamicBlockScaledKernel"
DEEPGEMM = "DeepGemmFp8BlockScaledMMKernel"
CUTLASS = "CutlassFp8BlockScaledMMKernel"
MARLIN = "MarlinFP8ScaledMMLinearKernel"
HUMMING = "HummingFP8ScaledMMLinearKernel"
# vLLM 0.33.0, model_executor/layers/quantization/utils/humming/priority.py
# (`_HUMMING_PREFERRED_CAPABILITIES`): on these compute capabilities vLLM moves Humming directly
# ahead of Marlin before walking the list (`prioritize_humming`, from `_resolve_backend_kernels`).
HUMMING_FIRST_CAPABILITIES = (90,)
# vLLM 0.33.0, vllm/utils/deep_gemm.py `_DEEPGEMM_BLACKWELL_EXCLUDED_MODEL_TYPES`: model types
# DeepGEMM is turned off for, per Blackwell family (compute capability // 10 * 10).
DEEPGEMM_OFF_ON_BLACKWELL: dict[str, tuple[int, ...]] = {
    "qwen3_5_text": (100, 120),
    "qwen3_5_moe_text": (100, 120),
    "kolibri1": (120,),
}


def block_kernel_order(capability: int | None) -> tuple[str, ...]:
    """The block-FP8 kernel classes in the order vLLM 0.33.0 tries them on a compute capability
    (90 for sm90): `FP8_BLOCK_KERNELS` with Humming moved directly ahead of Marlin on
    `HUMMING_FIRST_CAPABILITIES`; None (unknown) keeps the listed order."""
    names = [name for name, _ in FP8_BLOCK_KERNELS]
    if capability in HUMMING_FIRST_CAPABILITIES:
        names.insert(names.index(MARLIN), names.pop(names.index(HUMMING)))
    return tuple(names)


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


_LABELS = dict(FP8_BLOCK_KERNELS)
# Every kernel ahead of Triton: what VLLM_DISABLED_KERNELS must name to reach it without the flag.
AHEAD_OF_TRITON: tuple[str, ...] = tuple(
    name for name, _ in FP8_BLOCK_KERNELS[: [n for n, _ in FP8_BLOCK_KERNELS].index(TRITON_KERNEL)]
)

TRITON_FLAG = "--linear-backend triton"
# vLLM 0.33.0's --linear-backend values (`LinearBackend` in vllm/config/kernel.py); vLLM
# lower-cases a value and turns "-" into "_" before checking it (`_normalize_linear_backend`).
LINEAR_BACKENDS = (
    "auto",
    "cutlass",
    "flashinfer_cutlass",
    "flashinfer_cutedsl",
    "flashinfer_trtllm",
    "flashinfer_cudnn",
    "flashinfer_b12x",
    "b12x",
    "marlin",
    "humming",
    "triton",
    "deep_gemm",
    "torch",
    "aiter",
    "machete",
    "fbgemm",
    "conch",
    "exllama",
    "emulation",
    "xpu",
    "xpu_woq",
)


def linear_backend_value(value: str) -> str:
    """A --linear-backend value as vLLM 0.33.0 reads it: "Triton" and "deep-gemm" are
    "triton" and "deep_gemm".

    Raises:
        ValueError: not one of vLLM's values (`LINEAR_BACKENDS`); the message lists them.
    """
    normalized = value.strip().lower().replace("-", "_")
    if normalized not in LINEAR_BACKENDS:
        raise ValueError(
            f"--linear-backend {value!r} is not one of vLLM 0.33.0's: {', '.join(LINEAR_BACKENDS)}"
        )
    return normalized


TRITON_WAYS = (
    f"`{TRITON_FLAG}`",
    '`linear_backend_per_quant={"fp8_block_w8a8": "triton"}`',
    "`VLLM_DISABLED_KERNELS` naming every kernel ahead of Triton",
)
BATCH_INVARIANT_NOTE = "VLLM_BATCH_INVARIANT=1 ignores the files"


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


def arch_of(compute_capability: str | None) -> str | None:
    """The ARCH_BACKENDS family of a compute capability such as "8.9"; None when unknown or
    older than sm89 (no FP8 dot: our kernel cannot run there)."""
    match = re.fullmatch(r"(\d+)\.(\d+)", compute_capability or "")
    if match is None:
        return None
    major, minor = int(match[1]), int(match[2])
    if (major, minor) == (8, 9):
        return "sm89"
    if major == 9:
        return "sm90"
    if major >= 10:
        return "sm100/sm120"
    return None


def backend_lines(compute_capability: str | None = None) -> list[str]:
    """Plain-text lines saying, per architecture, which kernel vLLM 0.33.0 runs by default
    and what makes it run the Triton kernel (and so read the files); the device's own
    architecture is marked when its compute capability is known.

    Args:
        compute_capability: e.g. "8.9" from the store's environments; None when unknown.

    Returns:
        One unwrapped line each (callers wrap them to their width).
    """
    mine = arch_of(compute_capability)
    lines = [
        f"Which kernel vLLM {VLLM_VERSION} runs for block-FP8 linear layers (other "
        "versions may differ):"
    ]
    for arch in ARCH_BACKENDS:
        mark = " (this device)" if arch.arch == mine else ""
        lines.append(f"- {arch.arch}{mark} ({arch.gpus}): by default {arch.default}; {arch.note}.")
    lines.append(
        "- Triton, and so these files, runs by default on none of them; only with "
        f"{', or '.join(TRITON_WAYS)}; {BATCH_INVARIANT_NOTE}."
    )
    lines.append(
        "- Measure before switching: `tuner compare` times the tuned Triton kernel "
        "against the alternatives on your GPU."
    )
    return lines


# vLLM 0.33.0, choose_scaled_mm_linear_kernel: logger.info_once("Selected %s for %s", ...).
_SELECTED_RE = re.compile(r"\bSelected (?P<kernel>[A-Za-z0-9_]+) for (?P<layer>[A-Za-z0-9_.]+)")
# `'linear_backend': 'triton'` in vLLM's non-default args line, or `linear_backend=triton`.
_LINEAR_BACKEND_RE = re.compile(r"\blinear_backend'?\s*[=:]\s*'?(?P<backend>[A-Za-z0-9_]+)")


def selected_kernel(line: str) -> tuple[str, str] | None:
    """(kernel class, layer method) from vLLM's "Selected X for Y" start-up line; None for
    other lines and for kernels that are not block-FP8 linear kernels."""
    match = _SELECTED_RE.search(line)
    if match is None or match["kernel"] not in _LABELS:
        return None
    return match["kernel"], match["layer"]


def linear_backend_arg(line: str) -> str | None:
    """The `linear_backend` a start-up line names (e.g. "triton"), or None."""
    match = _LINEAR_BACKEND_RE.search(line)
    return match["backend"] if match else None


def kernel_verdict(kernels: tuple[str, ...], linear_backend: str | None) -> str | None:
    """One line: whether a server with these settings reads the tuned files.

    Args:
        kernels: the block-FP8 kernel classes the log says vLLM selected.
        linear_backend: the `linear_backend` the log's arguments name, or None.

    Returns:
        The line, or None when the log says neither.
    """
    if not kernels:
        if linear_backend == "triton":
            return (
                "vLLM was started with linear_backend triton: it runs the Triton kernel "
                "and reads the tuned files."
            )
        return None
    labels = ", ".join(f"{_LABELS[k]} ({k})" for k in kernels)
    if kernels == (TRITON_KERNEL,):
        return (
            f"vLLM selected {labels} for block-FP8 layers: the tuned files are read with "
            "this server's settings."
        )
    return (
        f"vLLM selected {labels} for block-FP8 layers: the tuned files are NOT read with "
        f"this server's settings; {TRITON_FLAG} makes it run the Triton kernel that reads "
        "them (measure first: tuner compare)."
    )


# The form of the flag in a vLLM engine-args config or Python call (vLLM 0.33.0,
# vllm/config/kernel.py: KernelConfig.linear_backend_per_quant, keyed by quantization).
PER_QUANT_FORM = 'linear_backend_per_quant={"fp8_block_w8a8": "triton"}'


@dataclass(frozen=True)
class DeviceAdvice:
    """Whether vLLM 0.33.0 reads a device's tuned files, and what makes it read them.

    Attributes:
        device_name: vLLM's device key.
        arch: the `ARCH_BACKENDS` family, e.g. "sm89"; None when not known.
        arch_source: where the architecture was learned, e.g. "compute capability 8.9, from
            its trials in the store"; "" when not known.
        default_kernel: the block-FP8 linear kernel vLLM runs there by default; None when the
            architecture is not known.
        needs_flag: the dense files are read only with `TRITON_FLAG` (every CUDA GPU: Triton
            is never vLLM 0.33.0's default there); False for the CPU interpreter.
    """

    device_name: str
    arch: str | None
    arch_source: str
    default_kernel: str | None
    needs_flag: bool

    def lines(self) -> list[str]:
        """The advice as plain-text sentences (no markup), one unwrapped line each."""
        if self.device_name == _INTERPRETER:
            return [
                f"{self.device_name} is Triton's CPU interpreter: its files carry CPU "
                "timings, for trying the tuner out; no vLLM server reads them."
            ]
        if self.arch is None:
            lines = [
                f"{self.device_name}: architecture not known (no trial in the store names a "
                "compute capability, and the GPU is not in the table of known GPUs).",
                f"vLLM {VLLM_VERSION} runs the Triton kernel, and so reads these files, by "
                "default on no CUDA GPU.",
            ]
        elif self.default_kernel is None:
            return [
                f"{self.device_name} is {self.arch} ({self.arch_source}): no FP8 dot "
                "(compute capability below 8.9), so the Triton block-FP8 kernel, and these "
                "files, cannot run there."
            ]
        else:
            lines = [
                f"{self.device_name} is {self.arch} ({self.arch_source}).",
                f"vLLM {VLLM_VERSION}'s default kernel for block-FP8 linear layers there is "
                f"{self.default_kernel}: these files are NOT read with default settings.",
            ]
        lines.append(
            f"To have them read, start vLLM with {TRITON_FLAG} (or {PER_QUANT_FORM}); "
            f"{BATCH_INVARIANT_NOTE}. Measure first: tuner compare times the tuned "
            "Triton kernel against the default kernels on this GPU."
        )
        if self.arch == "sm90":
            lines.append(
                "Fused-MoE files (E=...) are read by default here: vLLM moves its "
                "Triton MoE kernel first on sm90 with 128x128 FP8 weights and "
                "ep_size 1."
            )
        return lines


_INTERPRETER = "TRITON_INTERPRETER"


def device_advice(device_name: str, capabilities: Sequence[str] = ()) -> DeviceAdvice:
    """The advice for one device: its architecture from its trials in the store, else from
    the table of known GPUs (`tuner.kernels.gpus.KNOWN_GPUS`).

    Args:
        device_name: vLLM's device key, e.g. "NVIDIA_L20".
        capabilities: compute capabilities of its environments in the store, newest first
            (e.g. "8.9"; "" for the interpreter).

    Returns:
        The advice; `DeviceAdvice.lines` says it in words.
    """
    from tuner.kernels.gpus import gpu_model, known_capability

    if device_name == _INTERPRETER:
        return DeviceAdvice(device_name, None, "", None, needs_flag=False)
    capability, source = None, ""
    for recorded in capabilities:
        if re.fullmatch(r"\d{1,2}\.\d", recorded.strip()):
            capability = recorded.strip()
            source = f"compute capability {capability}, from its trials in the store"
            break
    model, known = gpu_model(device_name), known_capability(device_name)
    if capability is None and known is not None:
        capability = "{}.{}".format(*divmod(known, 10))
        source = f"{model}: compute capability {capability}, from the table of known GPUs"
    if capability is None:
        return DeviceAdvice(device_name, None, "", None, needs_flag=True)
    arch = arch_of(capability)
    if arch is None:  # older than sm89: no FP8 dot
        return DeviceAdvice(
            device_name, f"sm{capability.replace('.', '')}", source, None, needs_flag=False
        )
    default = next(a.default for a in ARCH_BACKENDS if a.arch == arch)
    return DeviceAdvice(device_name, arch, source, default, needs_flag=True)
