"""The project's facts, each defined once and imported from here: vLLM's config keys, trial and
comparison statuses, output dtypes and the dtype label of FP8 file names, the device-name rule,
a visible GPU and the resolved device, an A/B's client run, the M grids, Triton's major.minor,
the geometric mean and an exception's one line (the kernel source hash is
`tuner.core.hashing`'s, which the kernels import). Below every other package (`db` imports it
too): the standard library and `packaging` only."""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from packaging.version import InvalidVersion, Version

# vLLM's config keys in the order vLLM writes them to its JSON files
# (vllm/model_executor/layers/quantization/utils/configs/*.json, vLLM 0.33.0); the store's trial
# columns carry exactly these names.
CONFIG_KEYS: tuple[str, ...] = (
    "BLOCK_SIZE_M",
    "BLOCK_SIZE_N",
    "BLOCK_SIZE_K",
    "GROUP_SIZE_M",
    "num_warps",
    "num_stages",
)

# The dtype label vLLM puts in the names of its W8A8 block-FP8 config files, dense and fused-MoE
# alike (`dtype=fp8_w8a8`): vLLM 0.33.0's get_w8a8_block_fp8_configs (model_executor/layers/
# quantization/utils/fp8_utils.py) writes it into the dense name; _get_config_dtype_str
# (model_executor/layers/fused_moe/config.py) gives it to get_config_file_name for MoE. The only
# dtype this tuner tunes and imports.
FP8_DTYPE = "fp8_w8a8"


class TrialStatus(StrEnum):
    """Outcome of one trial, as stored in `trials.status`."""

    OK = "ok"
    INVALID = "invalid"  # fails a static constraint of the config space; never launched
    COMPILE_ERROR = "compile_error"
    OUT_OF_RESOURCES = "out_of_resources"  # shared memory or registers exceed the device
    WRONG_RESULT = "wrong_result"  # failed the correctness gate against the float64 reference
    TIMEOUT = "timeout"
    CRASHED = "crashed"


class OutDtype(StrEnum):
    """The GEMM's output dtypes, by torch's names: bfloat16 when serving (vLLM's W8A8 block-FP8
    linear), float16 the default of vLLM's tuning script (benchmark_w8a8_block_fp8.py)."""

    bfloat16 = "bfloat16"
    float16 = "float16"


# The values of OutDtype: what a sweep's out_dtype column and `--out-dtype` accept.
OUT_DTYPES: tuple[str, ...] = tuple(dtype.value for dtype in OutDtype)
# The output dtype wherever none is asked for: serving's (vLLM's W8A8 block-FP8 linear layers).
DEFAULT_OUT_DTYPE = OutDtype.bfloat16


class ComparisonStatus(StrEnum):
    """Outcome of one kernel at one (N, K, M) of `tuner compare`, as stored in
    `comparison_points.status`."""

    OK = "ok"  # checked against the float64 reference, then timed
    FAILED = "failed"  # a wrong result, or it did not run
    UNAVAILABLE = "unavailable"  # not timed here


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
DEVICE_NAME_RE = re.compile(rf"^\.?(?:[{DEVICE_NAME_CHARS}]\.?)+$")
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
        `\\` or `..` (see DEVICE_NAME_RE).
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


@dataclass(frozen=True)
class GpuInfo:
    """One visible CUDA GPU.

    Attributes:
        index: torch's device index in this process.
        visible_id: what to put in CUDA_VISIBLE_DEVICES to pin a child process to it.
        gpu_name: torch.cuda.get_device_name(), e.g. "NVIDIA L20".
        device_name: vLLM's key, e.g. "NVIDIA_L20".
        compute_capability: e.g. "8.9".
    """

    index: int
    visible_id: str
    gpu_name: str
    device_name: str
    compute_capability: str


@dataclass(frozen=True)
class AbRunRow:
    """One client run of `tuner ab` (`tuner.ab.run`), as the store keeps it (`db.ab`): block
    (0-based), arm, workload, seed, metrics and the client's result JSON."""

    block: int
    arm: str
    workload: str
    seed: int
    metrics: dict[str, float]
    client_result: dict[str, Any]


# vLLM's tuning script default batch sizes (benchmarks/kernels/benchmark_w8a8_block_fp8.py, main).
VLLM_M_GRID: tuple[int, ...] = (
    1,
    2,
    4,
    8,
    16,
    24,
    32,
    48,
    64,
    96,
    128,
    256,
    512,
    1024,
    1536,
    2048,
    3072,
    4096,
)
# M values every file should carry: decode (1), small batches (16, 32), prefill (2048, 4096).
REQUIRED_M: tuple[int, ...] = (1, 16, 32, 2048, 4096)


def geomean(values: Sequence[float]) -> float:
    """Geometric mean of positive values, e.g. of speedup ratios.

    Args:
        values: at least one positive number.

    Returns:
        exp(mean(log(v))) (`statistics.geometric_mean`).

    Raises:
        ValueError: `values` is empty or holds a value that is not positive
            (`statistics.StatisticsError`).
    """
    return statistics.geometric_mean(values)


def one_line(text: str, limit: int = 200) -> str:
    """`text` with each run of whitespace as one space, at most `limit` characters."""
    return " ".join(text.split())[:limit]


def error_line(exc: BaseException, limit: int = 200) -> str:
    """`Type: message` of `exc` on one line (`one_line`), at most `limit` characters."""
    return one_line(f"{type(exc).__name__}: {exc}", limit)


def minor_of(version: str) -> tuple[int, int] | None:
    """(major, minor) of a version string (`packaging.version`); None when it is not a version
    with at least a major and a minor, e.g. "3.6.0", "3.6.1+git3f2a", " 3.10" -> (3, 10). It
    must start with a digit, as Triton's do (packaging would take "v3.6")."""
    text = version.strip() if isinstance(version, str) else ""
    try:
        release = Version(text).release if text[:1].isdigit() else ()
    except InvalidVersion:
        return None
    return (release[0], release[1]) if len(release) >= 2 else None


def triton_minor(version: str) -> str:
    """Triton's major.minor of a version string, e.g. "3.6" for "3.6.1+git3f2a".

    Raises:
        ValueError: the string is not such a version.
    """
    found = minor_of(version)
    if found is None:
        raise ValueError(f"{version!r} is not a version such as 3.6.0")
    return f"{found[0]}.{found[1]}"
