"""File names of the fused-MoE block-FP8 config files, as vLLM 0.33.0 builds and reads them."""

from __future__ import annotations

import re

from tuner.core import FP8_DTYPE, is_device_name
from tuner.kernels.dense.naming import check_name_parts, engine_file_name, name_pattern
from tuner.kernels.engines import ENGINES

_MOE_NAME_RE = re.compile(name_pattern(r"E=(?P<E>[1-9][0-9]{0,8}),N=(?P<N>[1-9][0-9]{0,8}),"))


def moe_device_name(device_name: str) -> str:
    """The device part vLLM 0.33.0 puts in MoE file names: `get_config_file_name` in
    fused_moe.py names every device whose `_`-split name contains `H200` `NVIDIA_H200`."""
    return "NVIDIA_H200" if "H200" in device_name.split("_") else device_name


def moe_config_file_name(
    E: int, N: int, device_name: str, block_shape: tuple[int, int] = (128, 128)
) -> str:
    """`E={E},N={N},device_name={dev},dtype=fp8_w8a8,block_shape=[{bn},{bk}].json`, the name
    vLLM 0.33.0's `get_moe_configs` looks for (in VLLM_TUNED_CONFIG_FOLDER first, then its
    package's fused_moe/configs/). N is the per-rank intermediate size (w2's last dimension).

    Raises:
        ValueError: a non-positive size or a device name we do not store (`check_name_parts`).
    """
    bn, bk = block_shape
    check_name_parts(device_name, E=E, N=N, group_n=bn, group_k=bk)
    return (
        f"E={E},N={N},device_name={moe_device_name(device_name)},dtype={FP8_DTYPE},"
        f"block_shape=[{bn},{bk}].json"
    )


def parse_moe_config_file_name(name: str) -> tuple[int, int, str, str, tuple[int, int]]:
    """Parse an MoE block-FP8 file name (SGLang's `[128, 128]` spelling too).

    Returns:
        (E, N, device_name, dtype, block_shape).

    Raises:
        ValueError: not such a name; a per-tensor `dtype=fp8_w8a8.json` file (no block_shape)
            is out of scope and refused too.
    """
    match = _MOE_NAME_RE.fullmatch(name) if len(name) <= 512 else None
    if match is None or match["dtype"] != FP8_DTYPE or not is_device_name(match["device"]):
        raise ValueError(
            f"{name!r} is not a block-FP8 MoE config file name like "
            f"'{moe_config_file_name(128, 384, 'NVIDIA_H200')}'"
        )
    return (
        int(match["E"]),
        int(match["N"]),
        match["device"],
        match["dtype"],
        (int(match["bn"]), int(match["bk"])),
    )


def sglang_moe_config_file_name(
    E: int, N: int, device_name: str, block_shape: tuple[int, int] = (128, 128)
) -> str:
    """The name SGLang looks for the same file under. Its `get_config_file_name` (SGLang
    0.5.23, sglang/srt/layers/moe/moe_runner/triton_utils/fused_moe_triton_config.py) writes the
    block shape as a Python list, `[128, 128]`, and the device as torch names it with spaces as
    `_` (our device key), without vLLM's H200 rule; it reads the file from
    `configs/triton_<X_Y_Z>/` beside that module or under $SGLANG_MOE_CONFIG_DIR
    (the family's `engine_folders` rows have the folder of each release).

    Raises:
        ValueError: as `moe_config_file_name`.
    """
    moe_config_file_name(E, N, device_name, block_shape)  # the same checks
    bn, bk = block_shape
    return f"E={E},N={N},device_name={device_name},dtype={FP8_DTYPE},block_shape=[{bn}, {bk}].json"


def any_engine_file_name(name: str, engine: str, device_name: str | None = None) -> str:
    """A dense or fused-MoE config file name respelled for an engine (`block_shape=[a,b]` for
    vLLM, `[a, b]` for SGLang, as `tuner.kernels.dense.naming.engine_file_name` does).

    Args:
        name: a file name in either spelling.
        engine: "vllm" or "sglang".
        device_name: the device key the file belongs to; an MoE name for SGLang carries it
            (vLLM's name folds every H200 into NVIDIA_H200, `sglang_moe_config_file_name`);
            None keeps the device the name has.

    Raises:
        ValueError: an unknown engine, or a name neither parser accepts.
    """
    if not name.startswith("E="):
        return engine_file_name(name, engine)
    if engine not in ENGINES:
        raise ValueError(f"engine {engine!r} is not one of {', '.join(ENGINES)}")
    E, N, named_device, _, block_shape = parse_moe_config_file_name(name)
    if engine == "vllm":
        return moe_config_file_name(E, N, named_device, block_shape)
    return sglang_moe_config_file_name(E, N, device_name or named_device, block_shape)
