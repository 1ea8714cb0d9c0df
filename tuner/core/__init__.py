"""The project's facts, each defined once: vLLM's config keys, trial statuses, output dtypes and
the dtype label of FP8 file names, the device-name rule, the M grids, the Triton-version rule,
the kernel source hash and the geometric mean. Standard library only, below every other package
(`db` may import it too).

This module only re-exports; the definitions live in the modules named below.
"""

from tuner.core.device_names import DEVICE_ARG_PATTERN as DEVICE_ARG_PATTERN
from tuner.core.device_names import DEVICE_NAME_CHARS as DEVICE_NAME_CHARS
from tuner.core.device_names import DEVICE_NAME_MAX as DEVICE_NAME_MAX
from tuner.core.device_names import DEVICE_NAME_PATTERN as DEVICE_NAME_PATTERN
from tuner.core.device_names import INTERPRETER_DEVICE_NAME as INTERPRETER_DEVICE_NAME
from tuner.core.device_names import ResolvedDevice as ResolvedDevice
from tuner.core.device_names import is_device_name as is_device_name
from tuner.core.device_names import vllm_device_name as vllm_device_name
from tuner.core.facts import CONFIG_KEYS as CONFIG_KEYS
from tuner.core.facts import FP8_DTYPE as FP8_DTYPE
from tuner.core.facts import OUT_DTYPES as OUT_DTYPES
from tuner.core.facts import TRIAL_STATUSES as TRIAL_STATUSES
from tuner.core.facts import ComparisonStatus as ComparisonStatus
from tuner.core.facts import OutDtype as OutDtype
from tuner.core.facts import TrialStatus as TrialStatus
from tuner.core.hashing import kernel_source_hash as kernel_source_hash
from tuner.core.m_grid import REQUIRED_M as REQUIRED_M
from tuner.core.m_grid import VLLM_M_GRID as VLLM_M_GRID
from tuner.core.stats import geomean as geomean
from tuner.core.versions import minor_of as minor_of
from tuner.core.versions import triton_minor as triton_minor
