"""Device names as vLLM spells them, and which of them a `--device` argument names."""

from __future__ import annotations

import re
from collections.abc import Iterable

from tuner.kernels.device_name import DEVICE_NAME_MAX, is_device_name
from tuner.kernels.device_name import DEVICE_NAME_PATTERN as _NAME_PATTERN
from tuner.kernels.gpus import KNOWN_GPUS

# Key of the CPU interpreter backend in the store and in file names; no GPU is named so.
INTERPRETER_DEVICE_NAME = "TRITON_INTERPRETER"
INTERPRETER_ALIASES = frozenset({"interpreter", "cpu", INTERPRETER_DEVICE_NAME.lower()})
INTERPRETER_ALIASES_SHOWN = "interpreter"

# The pattern a device_name takes in the store, in URLs and in file names, length included
# (Python's re; `tuner.kernels.device_name.is_device_name` is the same rule): 1..128 printable
# ASCII characters without space, '"', '/', '\\' or '..', e.g. "Intel(R)_Data_Center_GPU_Max_1550".
DEVICE_NAME_PATTERN = rf"^(?=.{{1,{DEVICE_NAME_MAX}}}$){_NAME_PATTERN[1:]}"


# NVIDIA's model names as torch.cuda.get_device_name() gives them after "NVIDIA " (e.g. "H200",
# "H100 80GB HBM3", "A100-SXM4-80GB", "L40S", "GeForce RTX 4090 D", "RTX 6000 Ada Generation"):
# a series of letters and a number, or RTX and a number, then optional parts after '_' or '-'.
# A letter right after the number is a known suffix (L40S, A10G, RTX 4090 D as a separate part),
# so a typo like "H2OO" matches no rule.
_NVIDIA_MODEL_RE = re.compile(
    r"(?:GeForce_)?(?:(?:RTX|GTX|TITAN)_?)?(?:[A-Z]{1,3}\d{1,4}(?:S|G|X|Ti|e)?|\d{3,4}(?:Ti)?)"
    r"(?:[_-][A-Za-z0-9]+)*")
GPU_NAME_EXAMPLES = "L20, H200, NVIDIA H200, nvidia_h200 or NVIDIA_H100_80GB_HBM3"

def gpu_device_key(name: str) -> str:
    """vLLM's device key for a GPU named by a user, who need not have it at hand.

    A name with a vendor's prefix (`NVIDIA`, `AMD`, `Intel(R)`, any case for NVIDIA) is vLLM's
    key already, spaces as '_'; a bare NVIDIA model name ("H200", "l40s", "RTX 4090") gets the
    `NVIDIA_` prefix vLLM's key has. The model part must look like an NVIDIA model name
    (`_NVIDIA_MODEL_RE`), as typed or upper-cased.

    Args:
        name: e.g. "H200", "NVIDIA H200", "nvidia_h200", "AMD_Instinct_MI300X".

    Returns:
        e.g. "NVIDIA_H200".

    Raises:
        ValueError: the name follows no rule (e.g. "H2OO", "bad name!"), one line.
    """
    key = vllm_device_name(name)
    if is_device_name(key) and key.startswith(("AMD_", "Intel(R)_")):
        return key
    model = key[len("nvidia_"):] if key.lower().startswith("nvidia_") else key
    for spelled in (model, model.upper()):
        if _NVIDIA_MODEL_RE.fullmatch(spelled) and is_device_name(f"NVIDIA_{spelled}"):
            return f"NVIDIA_{spelled}"
    raise ValueError(f"{name!r:.80} is not a GPU model name such as {GPU_NAME_EXAMPLES}")


def vllm_device_name(gpu_name: str) -> str:
    """The device_name key vLLM puts in config file names for a GPU.

    vLLM 0.33.0 keys its files by `re.sub(r"[\\s/]+", "_", name)` of
    `current_platform.get_device_name()` (`get_device_name_as_file_name`,
    vllm/utils/platform_utils.py, called by fp8_utils.py and fused_moe.py; on CUDA the name is
    NVML's `nvmlDeviceGetName`, platforms/cuda.py): each run of whitespace or `/` becomes one
    `_` and every other character stays, so "Intel(R) Data Center GPU Max 1550" is keyed
    "Intel(R)_Data_Center_GPU_Max_1550". Here leading and trailing whitespace is dropped first
    (a name typed on the command line); NVML's names have none, and for them the two agree
    (the real-engine lane runs vLLM's rule beside this one, tests/engines/test_device_names.py).

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




def device_hint(device: str, known: Iterable[str] = ()) -> str:
    """A "did you mean" for a `--device` that names nothing: the closest of the known device
    names (vendor prefix dropped, as users type them) and the GPUs of `KNOWN_GPUS`.

    Args:
        device: what the user typed, e.g. "L2O".
        known: device names of the store or of the visible GPUs, e.g. "NVIDIA_L20".

    Returns:
        e.g. " (did you mean 'L20'?)", or "" when nothing is close.
    """
    from tuner.inputs.suggest import did_you_mean

    names = {re.sub(r"^NVIDIA_", "", name, flags=re.IGNORECASE) for name in known
             if name != INTERPRETER_DEVICE_NAME}
    names |= set(KNOWN_GPUS) | {INTERPRETER_ALIASES_SHOWN}
    typed = re.sub(r"^NVIDIA[_ ]", "", device.strip(), flags=re.IGNORECASE)
    if typed.lower() in {name.lower() for name in names}:
        return ""  # a real name, just not here
    return did_you_mean(typed, sorted(names))
