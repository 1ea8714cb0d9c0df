"""Device names as vLLM spells them, and which of them a `--device` argument names."""

from __future__ import annotations

import re
from collections.abc import Iterable

from tuner.kernels.dense.naming import DEVICE_NAME_MAX
from tuner.kernels.dense.naming import DEVICE_NAME_PATTERN as _NAME_PATTERN

# Key of the CPU interpreter backend in the store and in file names; never a GPU's (DESIGN §5).
INTERPRETER_DEVICE_NAME = "TRITON_INTERPRETER"
INTERPRETER_ALIASES = frozenset({"interpreter", "cpu", INTERPRETER_DEVICE_NAME.lower()})

# The pattern a device_name takes in the store, in URLs and in file names, length included
# (Python's re; `tuner.kernels.dense.naming.is_device_name` is the same rule): 1..128 printable
# ASCII characters without space, '"', '/', '\\' or '..', e.g. "Intel(R)_Data_Center_GPU_Max_1550".
DEVICE_NAME_PATTERN = rf"^(?=.{{1,{DEVICE_NAME_MAX}}}$){_NAME_PATTERN[1:]}"


def vllm_device_name(gpu_name: str) -> str:
    """The device_name key vLLM puts in config file names for a GPU.

    vLLM 0.33.0 keys its files by `current_platform.get_device_name().replace(" ", "_")`
    (`get_w8a8_block_fp8_configs`, fp8_utils.py; on CUDA the name is NVML's
    `nvmlDeviceGetName`, platforms/cuda.py): each space becomes `_` and every other character
    stays, so "Intel(R) Data Center GPU Max 1550" is keyed "Intel(R)_Data_Center_GPU_Max_1550".
    Here (DESIGN §7) leading and trailing whitespace is dropped and each run of whitespace or
    `/` becomes one `_`. For a name with single inner spaces and no other whitespace or `/`
    (every device of vLLM's shipped files) that is vLLM's key; otherwise the two differ (vLLM
    keeps `__` for two spaces, and a tab, or a `/` that makes it look in a subfolder).

    Args:
        gpu_name: the device name, e.g. "NVIDIA H100 80GB HBM3".

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


