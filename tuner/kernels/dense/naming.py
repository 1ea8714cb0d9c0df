"""File names of the dense block-FP8 GEMM's config files, as vLLM and SGLang spell and read them."""

from __future__ import annotations

import re
from dataclasses import dataclass

from tuner.core import DEVICE_NAME_CHARS, DEVICE_NAME_MAX, FP8_DTYPE, is_device_name
from tuner.kernels.dense.space import DEFAULT_BLOCK_SHAPE
from tuner.kernels.engines import ENGINES

# The dtype labels vLLM puts in block-scaled W8A8 file names (get_w8a8_block_configs, fp8_utils).
DTYPES: tuple[str, ...] = (FP8_DTYPE, "int8_w8a8")


def name_pattern(head: str) -> str:
    """The regular expression of a block-FP8 file name after its `head` (e.g. the dense
    `N=..,K=..,`): the device part (which may hold ',', '=' and '['), then `,dtype=<label>,
    block_shape=[n,k].json` (SGLang: `[n, k]`) with no ',' or '=' in the label, so that ending
    is found from the end of the name: the split is unique and parsing gives back the
    device_name that was put in."""
    return (
        rf"{head}device_name=(?P<device>[.{DEVICE_NAME_CHARS}]{{1,{DEVICE_NAME_MAX}}}),"
        r"dtype=(?P<dtype>[a-z0-9_]{1,32}),"
        r"block_shape=\[(?P<bn>[1-9][0-9]{0,5}), ?(?P<bk>[1-9][0-9]{0,5})\]\.json"
    )


def check_name_parts(device_name: str, **sizes: int) -> None:
    """Refuse a part that would make a name vLLM never reads or we cannot parse back.

    Raises:
        ValueError: a size that is not a positive integer, or a device name we do not store.
    """
    for label, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{label} must be a positive integer, got {value!r}")
    if not is_device_name(device_name):
        raise ValueError(
            f"device_name {device_name!r} must be 1..{DEVICE_NAME_MAX} printable "
            "ASCII characters without space, '\"', '/', '\\' or '..'"
        )


_FILE_NAME_RE = re.compile(name_pattern(r"N=(?P<N>[1-9][0-9]{0,8}),K=(?P<K>[1-9][0-9]{0,8}),"))


@dataclass(frozen=True)
class ConfigFileName:
    """The parts of a config file name; `name` spells it as vLLM does."""

    N: int
    K: int
    device_name: str
    dtype: str
    block_shape: tuple[int, int]

    @property
    def name(self) -> str:
        """The file name in vLLM's spelling (no space in block_shape)."""
        return config_file_name(self.N, self.K, self.device_name, self.block_shape, self.dtype)


def config_file_name(
    N: int,
    K: int,
    device_name: str,
    block_shape: tuple[int, int] = DEFAULT_BLOCK_SHAPE,
    dtype: str = FP8_DTYPE,
) -> str:
    """The name vLLM looks up for weight B [N, K] on a device.

    Source: `get_w8a8_block_configs` in vLLM 0.33.0 fp8_utils.py:
    `N={N},K={K},device_name={device_name},dtype={dtype},block_shape=[{bn},{bk}].json`.

    Args:
        N: Rows of the weight B [N, K].
        K: Columns of B [N, K] and of A [M, K].
        device_name: vLLM's device key, e.g. `NVIDIA_L20`.
        block_shape: [group_n, group_k] of the weight scales.
        dtype: The dtype label, one of `DTYPES`.

    Raises:
        ValueError: A part that would make a name vLLM never reads or we cannot parse back.
    """
    bn, bk = block_shape
    check_name_parts(device_name, N=N, K=K, group_n=bn, group_k=bk)
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    return f"N={N},K={K},device_name={device_name},dtype={dtype},block_shape=[{bn},{bk}].json"


# Where each engine release reads these files: the family's `engine_folders`
# (`tuner.kernels.dense.family`).


def engine_file_name(name: str, engine: str) -> str:
    """A vLLM config file name respelled for an engine.

    Args:
        name: a config file name in either spelling.
        engine: one of `ENGINES`.

    Returns:
        The name with `block_shape=[a,b]` (vLLM) or `block_shape=[a, b]` (SGLang).

    Raises:
        ValueError: an unknown engine, or a name `parse_config_file_name` rejects.
    """
    if engine not in ENGINES:
        raise ValueError(f"engine {engine!r} is not one of {', '.join(ENGINES)}")
    vllm_name = parse_config_file_name(name).name
    if engine == "vllm":
        return vllm_name
    head, _, tail = vllm_name.rpartition("block_shape=[")
    return f"{head}block_shape=[{tail.replace(',', ', ', 1)}"


def parse_config_file_name(name: str) -> ConfigFileName:
    """Parse a config file name; SGLang's `block_shape=[128, 128]` spelling is accepted too.

    Args:
        name: A bare file name (no folder).

    Raises:
        ValueError: The name is not a block-scaled W8A8 GEMM config file name.
    """
    match = _FILE_NAME_RE.fullmatch(name) if len(name) <= 512 else None
    if match is None or match["dtype"] not in DTYPES or not is_device_name(match["device"]):
        raise ValueError(
            f"{name!r} is not a config file name like '{config_file_name(1024, 512, 'NVIDIA_L20')}'"
        )
    return ConfigFileName(
        N=int(match["N"]),
        K=int(match["K"]),
        device_name=match["device"],
        dtype=match["dtype"],
        block_shape=(int(match["bn"]), int(match["bk"])),
    )
