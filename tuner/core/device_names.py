"""Device names: the device_name key vLLM puts in config file names, the rule that makes it from
a GPU's name, the check every kernel family, the store, the CLI and the HTTP service apply to it,
and a device resolved once from a `--device` argument."""

from __future__ import annotations

import re
from dataclasses import dataclass

# vLLM 0.33.0 keys its files by `re.sub(r"[\s/]+", "_", current_platform.get_device_name())`
# (get_device_name_as_file_name, vllm/utils/platform_utils.py): every other character of the
# platform's name stays, e.g. `Intel(R)_Arc(TM)_Pro_B70_Graphics` (a file vLLM ships). We take
# any printable ASCII but the space, `"`, `/` and `\`: no whitespace or control character
# (vLLM's key has none; the rest would break a line, a header or a path), no `/` (vLLM would
# look in a subfolder), no `"` or `\` (they end or escape a quoted header or shell word). A name
# is at most 128 characters and has no `..` (it names folders in some places).
DEVICE_NAME_MAX = 128
# The characters of a device name other than ".": ! # $ % & ' ( ) * + , - 0-9 : ; < = > ? @ A-Z
# [ ] ^ _ ` a-z { | } ~.
DEVICE_NAME_CHARS = r"!#-\-0-\[\]-~"
# Without look-arounds (pydantic's Rust regex engine has none), so the API can use it; pair it
# with a length check of DEVICE_NAME_MAX. No two dots in a row, and at least one other character.
DEVICE_NAME_PATTERN = rf"^\.?(?:[{DEVICE_NAME_CHARS}]\.?)+$"
DEVICE_NAME_RE = re.compile(DEVICE_NAME_PATTERN)
# A device as a user names it in a URL or on the command line: vLLM's key, or the GPU's own name
# with spaces ("NVIDIA L20"); resolved against the store's keys before use.
DEVICE_ARG_PATTERN = rf"^[ .{DEVICE_NAME_CHARS}]{{1,{DEVICE_NAME_MAX}}}$"

# Key of Triton's CPU interpreter in the store and in file names; no GPU is named so.
INTERPRETER_DEVICE_NAME = "TRITON_INTERPRETER"

# vLLM's rule: each run of whitespace or '/' becomes one '_'.
_VLLM_SEPARATORS = re.compile(r"[\s/]+")


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
    return _VLLM_SEPARATORS.sub("_", gpu_name.strip())


def is_device_name(name: str) -> bool:
    """True when `name` is a device_name key we store and put in file names.

    Args:
        name: e.g. `NVIDIA_L20` or `Intel(R)_Data_Center_GPU_Max_1550`.

    Returns:
        Whether it is 1..DEVICE_NAME_MAX printable ASCII characters without space, `"`, `/`,
        `\\` or `..` (see DEVICE_NAME_PATTERN).
    """
    return (
        isinstance(name, str)
        and len(name) <= DEVICE_NAME_MAX
        and DEVICE_NAME_RE.fullmatch(name) is not None
    )


@dataclass(frozen=True)
class ResolvedDevice:
    """A `--device` argument resolved once, carried from the option's parsing to the file name.

    Attributes:
        device_name: vLLM's key, e.g. "NVIDIA_H200", or `INTERPRETER_DEVICE_NAME`.
        gpu_name: the GPU's name as CUDA reports it (torch.cuda.get_device_name, e.g.
            "NVIDIA H200"); `INTERPRETER_DEVICE_NAME` on the interpreter (what its trials
            record); "" where no such GPU is visible here (a replay, a GPU of another host).
        compute_capability: e.g. "9.0"; "" where not known.
        interpreter: whether it is Triton's CPU interpreter.
        visible_ids: the CUDA_VISIBLE_DEVICES entries of the matching GPUs here, one worker
            each; (None,) for one worker pinned to no GPU (the interpreter, a plan, a replay);
            empty where no worker runs here (a sweep that workers on other hosts run).
    """

    device_name: str
    gpu_name: str = ""
    compute_capability: str = ""
    interpreter: bool = False
    visible_ids: tuple[str | None, ...] = ()
