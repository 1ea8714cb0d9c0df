"""Device names as vLLM spells them, and which of them a `--device` argument names."""

from __future__ import annotations

import re
from collections.abc import Iterable

# Key of the CPU interpreter backend in the store and in file names; never a GPU's (DESIGN §5).
INTERPRETER_DEVICE_NAME = "TRITON_INTERPRETER"
INTERPRETER_ALIASES = frozenset({"interpreter", "cpu", INTERPRETER_DEVICE_NAME.lower()})

# Patterns a device_name may take in the store, in URLs and in file names.
DEVICE_NAME_PATTERN = r"^[A-Za-z0-9_.\-]{1,128}$"


def vllm_device_name(gpu_name: str) -> str:
    """The device_name key vLLM puts in config file names for a GPU.

    vLLM replaces spaces in `torch.cuda.get_device_name()` with `_` (vLLM 0.33.0,
    `get_w8a8_block_fp8_configs`); DESIGN §7 also folds runs of whitespace and `/`.

    Args:
        gpu_name: the CUDA device name, e.g. "NVIDIA H100 80GB HBM3".

    Returns:
        e.g. "NVIDIA_H100_80GB_HBM3".
    """
    return re.sub(r"[\s/]+", "_", gpu_name.strip())


def is_interpreter(device: str) -> bool:
    """True when a `--device` argument asks for the CPU interpreter backend."""
    return device.strip().lower() in INTERPRETER_ALIASES


def matches(device: str, device_name: str) -> bool:
    """True when a user's `--device` argument names this device_name.

    Case-insensitive, with or without the vendor prefix: "L20", "nvidia_l20" and
    "NVIDIA L20" all name "NVIDIA_L20"; "L20" does not name "NVIDIA_L20S".
    """
    wanted = vllm_device_name(device).lower()
    have = device_name.lower()
    if is_interpreter(device):
        return have == INTERPRETER_DEVICE_NAME.lower()
    return wanted == have or f"nvidia_{wanted}" == have


def resolve(device: str, known: Iterable[str]) -> list[str]:
    """The names among `known` that a `--device` argument names, sorted."""
    return sorted(name for name in set(known) if matches(device, name))


