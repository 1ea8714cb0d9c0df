"""vLLM's block-FP8 config files: names, exact format and vLLM's lookup rule (pure)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tuner.core import CONFIG_KEYS, FP8_DTYPE, VLLM_M_GRID
from tuner.kernels.registry import family_of_file
from tuner.kernels.shape import FamilyShape, Shape

# Extra keys of AMD (ROCm) files, Triton's HIP compile options; such entries may lack num_stages.
# vLLM's MI300X/MI325X files carry kpack and matrix_instr_nonkdim without num_stages (e.g.
# N=1536,K=7168,device_name=AMD_Instinct_MI300X); its AMD_Radeon_Graphics files and SGLang's
# MI325X and Radeon files carry num_stages and waves_per_eu 0 (e.g. vLLM's
# N=1536,K=7168,device_name=AMD_Radeon_Graphics, SGLang's N=32768,K=512,device_name=
# AMD_Instinct_MI325X,...,block_shape=[128, 128].json).
AMD_KEYS: tuple[str, ...] = ("kpack", "matrix_instr_nonkdim", "waves_per_eu")
# Keys whose 0 is a value: Triton's HIPOptions default waves_per_eu and matrix_instr_nonkdim to
# 0, "let the compiler choose" (triton 3.9.0, backends/amd/compiler.py: waves_per_eu 0 sets no
# amdgpu-waves-per-eu attribute).
ZERO_ALLOWED: frozenset[str] = frozenset({"waves_per_eu", "matrix_instr_nonkdim"})
_M_KEY_RE = re.compile(r"[1-9][0-9]{0,9}")
MAX_M = 2**31 - 1  # Triton passes M as int32
MAX_VALUE = 2**16  # far above any block size, group size, warp or stage count
# Triton compiles only powers of two for these (tl.arange's ranges; warps per block).
POWER_OF_TWO_KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "num_warps")


def m_coverage(keys: Iterable[int]) -> tuple[list[int], list[int], list[int]]:
    """How a file's M keys cover vLLM's tuning grid `VLLM_M_GRID`.

    Args:
        keys: the file's M keys.

    Returns:
        (grid M present, grid M absent, keys outside the grid), each ascending.
    """
    present = set(keys)
    return (
        [M for M in VLLM_M_GRID if M in present],
        [M for M in VLLM_M_GRID if M not in present],
        sorted(present - set(VLLM_M_GRID)),
    )


def coverage_summary(keys: Iterable[int], *, file_order: bool = False) -> str:
    """One line on how a file's M keys cover vLLM's grid, and what vLLM runs at M=1 and 4096.

    Args:
        keys: the file's M keys (at least one).
        file_order: `keys` are in the order of the file as read from disk, which breaks
            vLLM's ties (`vllm_pick_key`); False for ascending files the tuner writes.

    Returns:
        e.g. "3 of vLLM's 18 M values: 2048, 3072, 4096; missing 1, 2, ...; M=1 runs the M=2048
        entry".
    """
    keys = list(keys)
    present, missing, extra = m_coverage(keys)
    text = f"{len(present)} of vLLM's {len(VLLM_M_GRID)} M values"
    text += f": {', '.join(map(str, present))}" if present else ""
    text += f"; missing {', '.join(map(str, missing))}" if missing else "; complete"
    text += f"; other keys {', '.join(map(str, extra))}" if extra else ""
    for M in (1, VLLM_M_GRID[-1]):
        if keys and M not in keys:
            text += f"; M={M} runs the M={vllm_pick_key(keys, M, file_order=file_order)} entry"
    return text


def _check_entry(entry: object, where: str) -> dict[str, int]:
    """One M's config, validated; NVIDIA keys in vLLM's order, other files' keys as given."""
    if not isinstance(entry, Mapping):
        raise ValueError(f"{where}: expected an object of config keys, got {type(entry).__name__}")
    unknown = [key for key in entry if key not in CONFIG_KEYS and key not in AMD_KEYS]
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(repr(k)[:40] for k in unknown[:5])}")
    is_amd = any(key in entry for key in AMD_KEYS)
    required = [key for key in CONFIG_KEYS if not (is_amd and key == "num_stages")]
    missing = [key for key in required if key not in entry]
    if missing:
        raise ValueError(f"{where}: missing key(s) {', '.join(missing)}")
    for key, value in entry.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{where}: {key} must be an integer, got {value!r:.40}")
        low = 0 if key in ZERO_ALLOWED else 1
        if not low <= value <= MAX_VALUE:
            shown = value if value.bit_length() < 64 else f"a {len(str(value))}-digit number"
            raise ValueError(f"{where}: {key}={shown} is outside {low}..{MAX_VALUE}")
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


def _load_json(text: str, source: str) -> object:
    """JSON without duplicate keys; ValueError, one line naming `source`, otherwise."""
    try:
        return json.loads(text, object_pairs_hook=_reject_duplicates)
    except RecursionError:
        raise ValueError(f"{source}: JSON nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, duplicate keys, ints over Python's digit limit
        raise ValueError(f"{source}: invalid JSON: {str(exc).splitlines()[0]}") from None


def parse_config_file(text: str, *, source: str = "<text>") -> dict[int, dict[str, int]]:
    """Parse and check a config file body strictly.

    Accepts vLLM's NVIDIA files (the six keys of `CONFIG_KEYS`) and AMD files of vLLM and SGLang
    (any of `AMD_KEYS`: `kpack`, `matrix_instr_nonkdim`, `waves_per_eu`, with or without
    `num_stages`), keeping each entry's keys in the file's order.

    Args:
        text: The file's text.
        source: Where the text came from, named in errors.

    Returns:
        M -> config, in the file's order; each config's keys in the file's order.

    Raises:
        ValueError: One line naming `source` and the problem: bad JSON, duplicate or non-decimal
            M keys, M outside 1..2**31-1, unknown or missing keys, non-integer, boolean or
            out-of-range values (1..65536; 0..65536 for waves_per_eu and
            matrix_instr_nonkdim), a block size or num_warps that is not a power of two, or an
            empty object.
    """
    data = _load_json(text, source)
    if not isinstance(data, dict):
        raise ValueError(f"{source}: expected a JSON object keyed by M, got {type(data).__name__}")
    # A fused-MoE file's Triton version (`dump_config_file`), dropped as get_moe_configs does.
    if isinstance(data.get("triton_version"), str):
        data.pop("triton_version")
    if not data:
        raise ValueError(f"{source}: no M entries")
    configs: dict[int, dict[str, int]] = {}
    for key, entry in data.items():
        if not _M_KEY_RE.fullmatch(key) or int(key) > MAX_M:
            raise ValueError(f"{source}: M key {key[:40]!r} is not a decimal integer in 1..{MAX_M}")
        where = f"{source}: M={key}"
        configs[int(key)] = entry = _check_entry(entry, where)
        for name in POWER_OF_TWO_KEYS:
            if entry.get(name, 1) & (entry.get(name, 1) - 1):
                raise ValueError(
                    f"{where}: {name}={entry[name]} is not a power of two (Triton compiles "
                    "none other: the engine cannot run this entry)"
                )
    return configs


def dump_config_file(
    configs: Mapping[int, Mapping[str, int]], triton_version: str | None = None
) -> str:
    """Serialize configs exactly as vLLM's tuning script writes them.

    Keys ascending by M; NVIDIA entries in `CONFIG_KEYS` order, AMD entries in their own order;
    `json.dumps(indent=4)` plus a newline (`save_configs` in vLLM's
    benchmarks/kernels/benchmark_w8a8_block_fp8.py writes `json.dump(..., indent=4)` then "\\n").

    Args:
        configs: M -> config.
        triton_version: written first as `"triton_version"`, as vLLM's benchmark_moe.py writes
            fused-MoE files (vLLM 0.33.0's shipped MoE files start with it; `get_moe_configs`
            pops it before use); None for none (vLLM's dense loader turns every key into an
            int, so dense files cannot carry it).

    Raises:
        ValueError: An M or an entry that `parse_config_file` would reject.
    """
    if not configs:
        raise ValueError("no M entries: vLLM treats an empty file as no file")
    body: dict[str, object] = {} if triton_version is None else {"triton_version": triton_version}
    for M in sorted(configs):
        if isinstance(M, bool) or not isinstance(M, int) or not 1 <= M <= MAX_M:
            raise ValueError(f"M={M!r} is not an integer in 1..{MAX_M}")
        body[str(M)] = _check_entry(configs[M], f"M={M}")
    return json.dumps(body, indent=4) + "\n"


def vllm_pick_key(keys: Iterable[int], M: int, *, file_order: bool = False) -> int:
    """The file key whose config vLLM runs for M.

    vLLM 0.33.0: `configs[min(configs.keys(), key=lambda x: abs(x - M))]`
    (w8a8_triton_block_scaled_mm, model_executor/layers/quantization/utils/fp8_utils.py;
    get_moe_configs' caller in fused_moe.py picks the same way): the nearest key, and on a tie
    `min` keeps the first key it meets, in the order of the file (`json.load` keeps it).

    Args:
        keys: The file's M keys.
        M: Rows of A [M, K] at run time (vLLM: `A.numel() // K`).
        file_order: True: `keys` are in the order of a file read from disk (e.g.
            `parse_config_file`'s dict), and a tie goes to the first of them, as in vLLM;
            a hand-written descending file then picks the larger key. False: the keys of a
            file the tuner writes (`dump_config_file`: ascending), whatever order they come
            in here: a tie goes to the smaller key.

    Raises:
        ValueError: `keys` is empty.
    """
    ordered = list(dict.fromkeys(keys)) if file_order else sorted(set(keys))
    if not ordered:
        raise ValueError("no keys to pick from")
    return min(ordered, key=lambda key: abs(key - M))


@dataclass(frozen=True)
class ParsedFile:
    """A config file read for import: what its name says, its entries and the sha256 of its
    bytes.

    Attributes:
        family: the kernel family whose file names it parses as (`family_of_file`).
        shape: N, K, block_shape and the family's other dimensions the name carries (a
            fused-MoE name gives E and N, and K = 0: `FamilyFiles.parse_file_name`).
        device_name: the device key in the name, e.g. `NVIDIA_L20`.
        configs: M -> config as in the file.
        sha256: hex sha256 of the file's bytes.
        vllm_name: the name as vLLM spells it (`KernelFamily.respell`).
    """

    family: str
    shape: Shape
    device_name: str
    configs: dict[int, dict[str, int]]
    sha256: str
    vllm_name: str

    @property
    def store_fields(self) -> dict[str, Any]:
        """N, K, block_shape, family and shape_params: the file's shape as `record_import`
        takes it."""
        shape = self.shape
        key = FamilyShape(self.family, shape)
        return {"N": shape.N, "K": shape.K, "block_shape": shape.block_shape} | key.store_fields()


MAX_FILE_BYTES = 1_048_576  # vLLM's largest shipped files are a few KiB


def parse_file_for_import(file_name: str, data: bytes, source: str | None = None) -> ParsedFile:
    """Check a whole config file, name and bytes, before anything is stored.

    Args:
        file_name: the bare file name (vLLM's or SGLang's spelling).
        data: the file's bytes.
        source: how errors name the file (default: `file_name`), e.g. its path.

    Returns:
        The parsed file; entries keep their keys (AMD files too).

    Raises:
        ValueError: one line naming the file: a name that is not a block-FP8 config file name,
            another dtype than fp8_w8a8, too many bytes, not UTF-8, or a body that
            `parse_config_file` rejects.
    """
    source = source or file_name
    try:
        family = family_of_file(file_name)
        shape, device_name, dtype = family.files.parse_file_name(file_name)
    except ValueError as exc:
        raise ValueError(f"{source}: {exc}" if source != file_name else str(exc)) from None
    if dtype != FP8_DTYPE:
        raise ValueError(
            f"{source}: dtype {dtype} is not {FP8_DTYPE}: this tuner keeps "
            "configs of the FP8 kernel only"
        )
    if len(data) > MAX_FILE_BYTES:
        raise ValueError(
            f"{source}: {len(data)} bytes, more than {MAX_FILE_BYTES}: not a config file"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{source}: not UTF-8 text") from None
    configs = parse_config_file(text, source=source)
    sha256 = hashlib.sha256(data).hexdigest()
    vllm_name = family.respell(file_name, "vllm")
    return ParsedFile(family.name, shape, device_name, configs, sha256, vllm_name)


def parse_config_list(text: str, *, source: str = "<text>") -> list[dict[str, int]]:
    """Parse a `--configs` file strictly: a JSON list of objects with exactly vLLM's six keys.

    Args:
        text: the file's text.
        source: how errors name the file.

    Returns:
        The configs in file order (duplicates kept; callers drop them).

    Raises:
        ValueError: one line naming `source`: bad JSON, not a non-empty list, an entry that is
            not an object, unknown or missing keys (AMD keys too: this kernel has no use for
            them), or values that are not integers in 1..65536.
    """
    data = _load_json(text, source)
    if not isinstance(data, list) or not data:
        raise ValueError(f"{source}: expected a non-empty JSON list of config objects")
    configs = []
    for index, item in enumerate(data):
        where = f"{source}: config #{index + 1}"
        amd = [key for key in AMD_KEYS if isinstance(item, Mapping) and key in item]
        if amd:
            raise ValueError(f"{where}: AMD key(s) {', '.join(amd)} do not apply to this kernel")
        configs.append(_check_entry(item, where))
    return configs
