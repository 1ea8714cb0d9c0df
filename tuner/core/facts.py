"""vLLM's config keys, the outcomes of a trial, the output dtypes and the dtype label of FP8
config file names: the values the store's columns, the kernels' configs, the CLI's choices and the
files share."""

from __future__ import annotations

from enum import StrEnum

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


class ComparisonStatus(StrEnum):
    """How one kernel fared at one (N, K, M) of `tuner compare`, as stored in
    `comparison_points.status`."""

    OK = "ok"  # checked against the float64 reference, then timed
    FAILED = "failed"  # wrong result, or did not run or could not be timed
    UNAVAILABLE = "unavailable"  # not timed here (not installed, no such GPU support)


# The values of TrialStatus, in its order: what the store's status column accepts.
TRIAL_STATUSES: tuple[str, ...] = tuple(status.value for status in TrialStatus)


class OutDtype(StrEnum):
    """The GEMM's output dtypes, by torch's names: bfloat16 when serving (vLLM's W8A8 block-FP8
    linear), float16 the default of vLLM's tuning script (benchmark_w8a8_block_fp8.py)."""

    bfloat16 = "bfloat16"
    float16 = "float16"


# The values of OutDtype: what a sweep's out_dtype column and `--out-dtype` accept.
OUT_DTYPES: tuple[str, ...] = tuple(dtype.value for dtype in OutDtype)
