"""Which kernel vLLM runs for block-FP8 linear layers, per GPU architecture, and what makes it run
the Triton kernel that reads our files, in words; what a server's log says of it. Pure facts and
text; nothing here imports vLLM. The table itself (the kernels, their order, the default per
architecture and weight shape) is `tuner.kernels.vllm_table`.

Source: vLLM 0.33.0, `vllm/model_executor/kernels/linear/__init__.py`
(`choose_scaled_mm_linear_kernel` logs `Selected <kernel class> for <layer method>` once per
process).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from tuner.core import INTERPRETER_DEVICE_NAME
from tuner.kernels.gpus import gpu_model, known_capability
from tuner.kernels.vllm_table import (
    ARCH_BACKENDS,
    FP8_BLOCK_KERNELS,
    TRITON_FLAG,
    TRITON_KERNEL,
    VLLM_VERSION,
    arch_of,
    capability_number,
    capability_text,
)

_LABELS = dict(FP8_BLOCK_KERNELS)

# vLLM 0.33.0's --linear-backend values (`LinearBackend` in vllm/config/kernel.py); vLLM
# lower-cases a value and turns "-" into "_" before checking it (`_normalize_linear_backend`).
LINEAR_BACKENDS = tuple(
    "auto cutlass flashinfer_cutlass flashinfer_cutedsl flashinfer_trtllm flashinfer_cudnn "
    "flashinfer_b12x b12x marlin humming triton deep_gemm torch aiter machete fbgemm conch "
    "exllama emulation xpu xpu_woq".split()
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


# The form of the flag in a vLLM engine-args config or Python call (vLLM 0.33.0,
# vllm/config/kernel.py: KernelConfig.linear_backend_per_quant, keyed by quantization).
PER_QUANT_FORM = 'linear_backend_per_quant={"fp8_block_w8a8": "triton"}'
TRITON_WAYS = (
    f"`{TRITON_FLAG}`",
    f"`{PER_QUANT_FORM}`",
    "`VLLM_DISABLED_KERNELS` naming every kernel ahead of Triton",
)
BATCH_INVARIANT_NOTE = "VLLM_BATCH_INVARIANT=1 ignores the files"


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


@dataclass(frozen=True)
class DeviceAdvice:
    """Whether vLLM 0.33.0 reads a device's tuned files, and what makes it read them.

    Attributes:
        text: the advice as plain-text sentences (no markup), one unwrapped line each.
        needs_flag: the dense files are read only with `TRITON_FLAG` (every CUDA GPU with an
            FP8 dot: Triton is never vLLM 0.33.0's default there); False for the CPU
            interpreter and GPUs older than sm89.
    """

    text: tuple[str, ...]
    needs_flag: bool

    def lines(self) -> list[str]:
        """`text` as a list."""
        return list(self.text)


def device_advice(device_name: str, capabilities: Sequence[str] = ()) -> DeviceAdvice:
    """The advice for one device (vLLM's key): its architecture from `capabilities`, its
    environments' compute capabilities in the store, newest first ("" for the interpreter),
    else from the table of known GPUs (`tuner.kernels.gpus.KNOWN_GPUS`)."""
    if device_name == INTERPRETER_DEVICE_NAME:
        cpu = f"{device_name} is Triton's CPU interpreter: its files carry CPU timings, for "
        return DeviceAdvice((cpu + "trying the tuner out; no vLLM server reads them.",), False)
    recorded = next(filter(None, map(capability_number, capabilities)), None)
    number = recorded or known_capability(device_name)
    arch = None
    if number is None:
        lines = [
            f"{device_name}: architecture not known (no trial in the store names a compute "
            "capability, and the GPU is not in the table of known GPUs).",
            f"vLLM {VLLM_VERSION} runs the Triton kernel, and so reads these files, by default "
            "on no CUDA GPU.",
        ]
    else:
        capability = f"compute capability {capability_text(number)}"
        source = f"{capability}, from its trials in the store"
        if recorded is None:
            source = f"{gpu_model(device_name)}: {capability}, from the table of known GPUs"
        arch = arch_of(capability_text(number))
        if arch is None:  # older than sm89: no FP8 dot
            line = (
                f"{device_name} is sm{number} ({source}): no FP8 dot (compute capability below "
                "8.9), so the Triton block-FP8 kernel, and these files, cannot run there."
            )
            return DeviceAdvice((line,), False)
        default = next(a.default for a in ARCH_BACKENDS if a.arch == arch)
        lines = [
            f"{device_name} is {arch} ({source}).",
            f"vLLM {VLLM_VERSION}'s default kernel for block-FP8 linear layers there is "
            f"{default}: these files are NOT read with default settings.",
        ]
    lines.append(
        f"To have them read, start vLLM with {TRITON_FLAG} (or {PER_QUANT_FORM}); "
        f"{BATCH_INVARIANT_NOTE}. Measure first: tuner compare times the tuned "
        "Triton kernel against the default kernels on this GPU."
    )
    if arch == "sm90":
        lines.append(
            "Fused-MoE files (E=...) are read by default here: vLLM moves its Triton MoE "
            "kernel first on sm90 with 128x128 FP8 weights and ep_size 1."
        )
    return DeviceAdvice(tuple(lines), True)
