"""vLLM's block-FP8 config files: names, exact format and vLLM's lookup rule (pure)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tuner.space import CONFIG_KEYS, DEFAULT_BLOCK_SHAPE

# vLLM's tuning script default batch sizes (benchmarks/kernels/benchmark_w8a8_block_fp8.py, main).
VLLM_M_GRID: tuple[int, ...] = (
    1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096,
)
# M values every file should carry: decode (1), small batches (16, 32), prefill (2048, 4096).
REQUIRED_M: tuple[int, ...] = (1, 16, 32, 2048, 4096)

FP8_DTYPE = "fp8_w8a8"
# The dtype labels vLLM puts in block-scaled W8A8 file names (get_w8a8_block_configs, fp8_utils).
DTYPES: tuple[str, ...] = (FP8_DTYPE, "int8_w8a8")
# Extra keys of AMD (ROCm) files; such entries may lack num_stages (vLLM's MI300X files).
AMD_KEYS: tuple[str, ...] = ("kpack", "matrix_instr_nonkdim")
DEVICE_NAME_RE = re.compile(r"[A-Za-z0-9_.\-]{1,128}")
_M_KEY_RE = re.compile(r"[1-9][0-9]{0,9}")
_FILE_NAME_RE = re.compile(
    r"N=(?P<N>[1-9][0-9]{0,8}),K=(?P<K>[1-9][0-9]{0,8}),"
    r"device_name=(?P<device>[A-Za-z0-9_.\-]{1,128}),dtype=(?P<dtype>[a-z0-9_]+),"
    r"block_shape=\[(?P<bn>[1-9][0-9]{0,5}), ?(?P<bk>[1-9][0-9]{0,5})\]\.json"
)
MAX_M = 2**31 - 1  # Triton passes M as int32
MAX_VALUE = 2**16  # far above any block size, group size, warp or stage count


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
    N: int, K: int, device_name: str, block_shape: tuple[int, int] = DEFAULT_BLOCK_SHAPE,
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
    for label, value in (("N", N), ("K", K), ("group_n", bn), ("group_k", bk)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{label} must be a positive integer, got {value!r}")
    if not DEVICE_NAME_RE.fullmatch(device_name):
        raise ValueError(f"device_name {device_name!r} must match {DEVICE_NAME_RE.pattern}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    return f"N={N},K={K},device_name={device_name},dtype={dtype},block_shape=[{bn},{bk}].json"


def parse_config_file_name(name: str) -> ConfigFileName:
    """Parse a config file name; SGLang's `block_shape=[128, 128]` spelling is accepted too.

    Args:
        name: A bare file name (no folder).

    Raises:
        ValueError: The name is not a block-scaled W8A8 GEMM config file name.
    """
    match = _FILE_NAME_RE.fullmatch(name)
    if match is None or match["dtype"] not in DTYPES:
        raise ValueError(
            f"{name!r} is not a config file name like "
            f"'{config_file_name(1024, 512, 'NVIDIA_L20')}'"
        )
    return ConfigFileName(
        N=int(match["N"]), K=int(match["K"]), device_name=match["device"],
        dtype=match["dtype"], block_shape=(int(match["bn"]), int(match["bk"])),
    )


def _check_entry(entry: object, where: str) -> dict[str, int]:
    """One M's config, validated; NVIDIA keys in vLLM's order, other files' keys as given."""
    if not isinstance(entry, Mapping):
        raise ValueError(f"{where}: expected an object of config keys, got {type(entry).__name__}")
    unknown = [key for key in entry if key not in CONFIG_KEYS and key not in AMD_KEYS]
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))}")
    is_amd = any(key in entry for key in AMD_KEYS)
    required = [key for key in CONFIG_KEYS if not (is_amd and key == "num_stages")]
    missing = [key for key in required if key not in entry]
    if missing:
        raise ValueError(f"{where}: missing key(s) {', '.join(missing)}")
    for key, value in entry.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{where}: {key} must be an integer, got {value!r}")
        if not 1 <= value <= MAX_VALUE:
            raise ValueError(f"{where}: {key}={value} is outside 1..{MAX_VALUE}")
    keys = list(entry) if is_amd else list(CONFIG_KEYS)
    return {key: entry[key] for key in keys}


def _reject_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """json object hook: a key given twice is an error (json keeps the last one silently)."""
    result: dict[str, object] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def parse_config_file(text: str, *, source: str = "<text>") -> dict[int, dict[str, int]]:
    """Parse and check a config file body strictly.

    Accepts vLLM's NVIDIA files (the six keys of `CONFIG_KEYS`) and its AMD files (`kpack`,
    `matrix_instr_nonkdim`, no `num_stages`), keeping each entry's keys.

    Args:
        text: The file's text.
        source: Where the text came from, named in errors.

    Returns:
        M -> config, in the file's order; each config's keys in the file's order.

    Raises:
        ValueError: One line naming `source` and the problem: bad JSON, duplicate or non-decimal
            M keys, M outside 1..2**31-1, unknown or missing keys, non-integer, boolean or
            out-of-range values, or an empty object.
    """
    try:
        data = json.loads(text, object_pairs_hook=_reject_duplicates)
    except RecursionError:
        raise ValueError(f"{source}: JSON nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, duplicate keys, ints over Python's digit limit
        raise ValueError(f"{source}: invalid JSON: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{source}: expected a JSON object keyed by M, got {type(data).__name__}")
    if not data:
        raise ValueError(f"{source}: no M entries")
    configs: dict[int, dict[str, int]] = {}
    for key, entry in data.items():
        if not _M_KEY_RE.fullmatch(key) or int(key) > MAX_M:
            raise ValueError(f"{source}: M key {key[:40]!r} is not a decimal integer in 1..{MAX_M}")
        configs[int(key)] = _check_entry(entry, f"{source}: M={key}")
    return configs


def dump_config_file(configs: Mapping[int, Mapping[str, int]]) -> str:
    """Serialize configs exactly as vLLM's tuning script writes them.

    Keys ascending by M; NVIDIA entries in `CONFIG_KEYS` order, AMD entries in their own order;
    `json.dumps(indent=4)` plus a newline (`save_configs` in vLLM's
    benchmarks/kernels/benchmark_w8a8_block_fp8.py writes `json.dump(..., indent=4)` then "\\n").

    Args:
        configs: M -> config.

    Raises:
        ValueError: An M or an entry that `parse_config_file` would reject.
    """
    if not configs:
        raise ValueError("no M entries: vLLM treats an empty file as no file")
    body: dict[str, dict[str, int]] = {}
    for M in sorted(configs):
        if isinstance(M, bool) or not isinstance(M, int) or not 1 <= M <= MAX_M:
            raise ValueError(f"M={M!r} is not an integer in 1..{MAX_M}")
        body[str(M)] = _check_entry(configs[M], f"M={M}")
    return json.dumps(body, indent=4) + "\n"


def vllm_pick_key(keys: Iterable[int], M: int) -> int:
    """The file key whose config vLLM runs for M.

    vLLM: `configs[min(configs.keys(), key=lambda x: abs(x - M))]` (w8a8_triton_block_scaled_mm,
    fp8_utils.py): the nearest key; on a tie `min` keeps the first, which is the smaller key in
    an ascending file. Here ties go to the smaller key whatever the order of `keys`.

    Args:
        keys: The file's M keys.
        M: Rows of A [M, K] at run time (vLLM: `A.numel() // K`).

    Raises:
        ValueError: `keys` is empty.
    """
    ordered = sorted(set(keys))
    if not ordered:
        raise ValueError("no keys to pick from")
    return min(ordered, key=lambda key: abs(key - M))
