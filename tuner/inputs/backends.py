"""Which kernel vLLM runs for block-FP8 linear layers, per GPU architecture, and what makes it run
the Triton kernel that reads our files. Pure facts and text; nothing here imports vLLM.

Source: vLLM 0.33.0, `vllm/model_executor/kernels/linear/__init__.py`
(`_POSSIBLE_FP8_BLOCK_KERNELS[CUDA]`, walked in order by `choose_scaled_mm_linear_kernel`, which
logs `Selected <kernel class> for <layer method>` once per process), as summarized in DESIGN §9.
Other vLLM versions may order the kernels differently.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

VLLM_VERSION = "0.33.0"

# `_POSSIBLE_FP8_BLOCK_KERNELS[CUDA]` of vLLM 0.33.0, in priority order: (class name, label).
FP8_BLOCK_KERNELS: tuple[tuple[str, str], ...] = (
    ("FlashInferFp8DeepGEMMDynamicBlockScaledKernel", "FlashInfer DeepGEMM"),
    ("DeepGemmFp8BlockScaledMMKernel", "DeepGEMM"),
    ("CutlassFp8BlockScaledMMKernel", "CUTLASS"),
    ("B12xFp8BlockScaledMMKernel", "B12x"),
    ("MarlinFP8ScaledMMLinearKernel", "Marlin (weight-only FP8, W8A16)"),
    ("HummingFP8ScaledMMLinearKernel", "Humming"),
    ("TritonFp8BlockScaledMMKernel", "Triton (reads the tuned files)"),
    ("BlockWiseTorchFP8ScaledMMKernel", "torch scaled_mm"),
)
TRITON_KERNEL = "TritonFp8BlockScaledMMKernel"
_LABELS = dict(FP8_BLOCK_KERNELS)
# Every kernel ahead of Triton: what VLLM_DISABLED_KERNELS must name to reach it without the flag.
AHEAD_OF_TRITON: tuple[str, ...] = tuple(
    name for name, _ in FP8_BLOCK_KERNELS[: [n for n, _ in FP8_BLOCK_KERNELS].index(TRITON_KERNEL)])

TRITON_FLAG = "--linear-backend triton"
# vLLM 0.33.0's --linear-backend values (`LinearBackend` in vllm/config/kernel.py); vLLM
# lower-cases a value and turns "-" into "_" before checking it (`_normalize_linear_backend`).
LINEAR_BACKENDS = ("auto", "cutlass", "flashinfer_cutlass", "flashinfer_cutedsl",
                   "flashinfer_trtllm", "flashinfer_cudnn", "flashinfer_b12x", "b12x", "marlin",
                   "humming", "triton", "deep_gemm", "torch", "aiter", "machete", "fbgemm",
                   "conch", "exllama", "emulation", "xpu", "xpu_woq")


def linear_backend_value(value: str) -> str:
    """A --linear-backend value as vLLM 0.33.0 reads it: "Triton" and "deep-gemm" are
    "triton" and "deep_gemm".

    Raises:
        ValueError: not one of vLLM's values (`LINEAR_BACKENDS`); the message lists them.
    """
    normalized = value.strip().lower().replace("-", "_")
    if normalized not in LINEAR_BACKENDS:
        raise ValueError(f"--linear-backend {value!r} is not one of vLLM 0.33.0's: "
                         f"{', '.join(LINEAR_BACKENDS)}")
    return normalized
TRITON_WAYS = (
    f"`{TRITON_FLAG}`",
    "`linear_backend_per_quant={\"fp8_block_w8a8\": \"triton\"}`",
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


# DESIGN §9 (vLLM 0.33.0): sm90 runs DeepGEMM (bf16 output, N % 64 == 0, K % 128 == 0) or
# CUTLASS; sm89 runs Marlin, and Humming when Marlin is disabled. sm100 and sm120 have kernels
# ahead of Marlin too (FlashInfer DeepGEMM needs cc >= 100, B12x the sm120 family).
ARCH_BACKENDS: tuple[ArchBackend, ...] = (
    ArchBackend("sm89", "L20, L40S, RTX 4090", "Marlin (weight-only FP8, W8A16)",
                "with Marlin disabled Humming runs, so disabling Marlin alone is not enough"),
    ArchBackend("sm90", "H100, H200, H20", "DeepGEMM, or CUTLASS where DeepGEMM cannot run",
                "DeepGEMM needs bf16 output, N % 64 == 0 and K % 128 == 0"),
    ArchBackend("sm100/sm120", "B200, RTX 5090", "FlashInfer DeepGEMM, DeepGEMM, CUTLASS or B12x",
                "whichever of them supports the GPU first"),
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
    lines = [f"Which kernel vLLM {VLLM_VERSION} runs for block-FP8 linear layers (other "
             "versions may differ):"]
    for arch in ARCH_BACKENDS:
        mark = " (this device)" if arch.arch == mine else ""
        lines.append(f"- {arch.arch}{mark} ({arch.gpus}): by default {arch.default}; "
                     f"{arch.note}.")
    lines.append("- Triton, and so these files, runs by default on none of them; only with "
                 f"{', or '.join(TRITON_WAYS)}; {BATCH_INVARIANT_NOTE}.")
    lines.append("- Measure before switching: `tuner compare` times the tuned Triton kernel "
                 "against the alternatives on your GPU.")
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
            return ("vLLM was started with linear_backend triton: it runs the Triton kernel "
                    "and reads the tuned files.")
        return None
    labels = ", ".join(f"{_LABELS[k]} ({k})" for k in kernels)
    if kernels == (TRITON_KERNEL,):
        return (f"vLLM selected {labels} for block-FP8 layers: the tuned files are read with "
                "this server's settings.")
    return (f"vLLM selected {labels} for block-FP8 layers: the tuned files are NOT read with "
            f"this server's settings; {TRITON_FLAG} makes it run the Triton kernel that reads "
            "them (measure first: tuner compare).")


# The form of the flag in a vLLM engine-args config or Python call (DESIGN §9).
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
            return [f"{self.device_name} is Triton's CPU interpreter: its files carry CPU "
                    "timings, for trying the tuner out; no vLLM server reads them."]
        if self.arch is None:
            lines = [f"{self.device_name}: architecture not known (no trial in the store names a "
                     "compute capability, and the GPU is not in the table of known GPUs).",
                     f"vLLM {VLLM_VERSION} runs the Triton kernel, and so reads these files, by "
                     "default on no CUDA GPU."]
        elif self.default_kernel is None:
            return [f"{self.device_name} is {self.arch} ({self.arch_source}): no FP8 dot "
                    "(compute capability below 8.9), so the Triton block-FP8 kernel, and these "
                    "files, cannot run there."]
        else:
            lines = [f"{self.device_name} is {self.arch} ({self.arch_source}).",
                     f"vLLM {VLLM_VERSION}'s default kernel for block-FP8 linear layers there is "
                     f"{self.default_kernel}: these files are NOT read with default settings."]
        lines.append(f"To have them read, start vLLM with {TRITON_FLAG} (or {PER_QUANT_FORM}); "
                     f"{BATCH_INVARIANT_NOTE}. Measure first: tuner compare times the tuned "
                     "Triton kernel against the default kernels on this GPU.")
        if self.arch == "sm90":
            lines.append("Fused-MoE files (E=...) are read by default here: vLLM moves its "
                         "Triton MoE kernel first on sm90 with 128x128 FP8 weights and "
                         "ep_size 1.")
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
    from tuner.kernels.gpus import KNOWN_GPUS, gpu_model

    if device_name == _INTERPRETER:
        return DeviceAdvice(device_name, None, "", None, needs_flag=False)
    capability, source = None, ""
    for known in capabilities:
        if re.fullmatch(r"\d{1,2}\.\d", known.strip()):
            capability = known.strip()
            source = f"compute capability {capability}, from its trials in the store"
            break
    model = gpu_model(device_name)
    if capability is None and model in KNOWN_GPUS:
        capability = "{}.{}".format(*divmod(KNOWN_GPUS[model], 10))
        source = f"{model}: compute capability {capability}, from the table of known GPUs"
    if capability is None:
        return DeviceAdvice(device_name, None, "", None, needs_flag=True)
    arch = arch_of(capability)
    if arch is None:  # older than sm89: no FP8 dot
        return DeviceAdvice(device_name, f"sm{capability.replace('.', '')}", source, None,
                            needs_flag=False)
    default = next(a.default for a in ARCH_BACKENDS if a.arch == arch)
    return DeviceAdvice(device_name, arch, source, default, needs_flag=True)
