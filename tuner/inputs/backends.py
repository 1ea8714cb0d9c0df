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
READ_RULE = (
    f"vLLM {VLLM_VERSION} reads the dense files only with {TRITON_FLAG} or {PER_QUANT_FORM}; "
    "VLLM_BATCH_INVARIANT=1 ignores them."
)


def backend_lines(compute_capability: str | None = None) -> list[str]:
    """A heading, then one "- " line per architecture of vLLM 0.33.0's default block-FP8
    kernel (the device's own marked when `compute_capability`, e.g. "8.9", is known), then
    `READ_RULE`; unwrapped (callers wrap them to their width)."""
    mine = arch_of(compute_capability)
    lines = [f"vLLM {VLLM_VERSION}'s default kernel for block-FP8 linear layers:"]
    for arch in ARCH_BACKENDS:
        mark = " (this device)" if arch.arch == mine else ""
        lines.append(f"- {arch.arch}{mark} ({arch.gpus}): by default {arch.default}; {arch.note}.")
    return [*lines, f"- {READ_RULE}"]


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
    """One line: whether a server reads the tuned files, from the block-FP8 kernel classes its
    log says vLLM selected and the `linear_backend` its arguments name; None when it says
    neither."""
    if kernels:
        said = f"vLLM selected {', '.join(f'{_LABELS[k]} ({k})' for k in kernels)}"
    elif linear_backend == "triton":
        said = "vLLM was started with linear_backend triton"
    else:
        return None
    if kernels in ((), (TRITON_KERNEL,)):
        return f"{said}: the tuned files are read with this server's settings."
    return f"{said}: the tuned files are NOT read with this server's settings. {READ_RULE}"


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
        cpu = (
            f"{device_name} is Triton's CPU interpreter: its files hold CPU timings, "
            "read by no vLLM server."
        )
        return DeviceAdvice((cpu,), False)
    recorded = next(filter(None, map(capability_number, capabilities)), None)
    number = recorded or known_capability(device_name)
    if number is None:
        unknown = (
            f"{device_name}: architecture not known (no compute capability in the store or "
            "the table of known GPUs)."
        )
        return DeviceAdvice((unknown, READ_RULE), True)
    where = "its trials in the store" if recorded else "the table of known GPUs"
    source = f"compute capability {capability_text(number)}, from {where}"
    if recorded is None:
        source = f"{gpu_model(device_name)}: {source}"
    arch = arch_of(capability_text(number))
    if arch is None:
        old = (
            f"{device_name} is sm{number} ({source}): below sm89 there is no FP8 dot, so "
            "these files cannot run there."
        )
        return DeviceAdvice((old,), False)
    default = next(a.default for a in ARCH_BACKENDS if a.arch == arch)
    lines = [
        f"{device_name} is {arch} ({source}).",
        f"vLLM's default kernel there is {default}.",
        READ_RULE,
    ]
    if arch == "sm90":
        lines.append(
            "Fused-MoE files (E=...) are read by default here: vLLM moves its Triton MoE "
            "kernel first on sm90 with 128x128 FP8 weights and ep_size 1."
        )
    return DeviceAdvice(tuple(lines), True)
