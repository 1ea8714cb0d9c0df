"""Device names: the device_name key vLLM puts in config file names, as every kernel family,
the store, the CLI and the HTTP service check it."""

from __future__ import annotations

import re

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


def is_device_name(name: str) -> bool:
    """True when `name` is a device_name key we store and put in file names.

    Args:
        name: e.g. `NVIDIA_L20` or `Intel(R)_Data_Center_GPU_Max_1550`.

    Returns:
        Whether it is 1..DEVICE_NAME_MAX printable ASCII characters without space, `"`, `/`,
        `\\` or `..` (see DEVICE_NAME_PATTERN).
    """
    return (isinstance(name, str) and len(name) <= DEVICE_NAME_MAX
            and DEVICE_NAME_RE.fullmatch(name) is not None)
