"""The device_name rule every family and layer checks (`tuner.core.is_device_name`), and the
store's check (`db.work`), which applies it."""

from __future__ import annotations

import re

import pytest

from db.work import _check_device_name
from tuner.core import DEVICE_ARG_PATTERN, DEVICE_NAME_MAX, is_device_name

KEPT = [
    "Intel(R)_Data_Center_GPU_Max_1550",
    "Intel(R)_Arc(TM)_Pro_B70_Graphics",
    "AMD_Instinct_MI300X",
    "NVIDIA_A100-SXM4-80GB",
    "Odd,name=[x]:y;z",
    "a.b",
    "x" * 128,
]
REFUSED = [
    "",
    "has space",
    'quote"d',
    "sl/ash",
    "back\\slash",
    "dot..dot",
    "..",
    ".",
    "tab\tx",
    "caf\u00e9",
    "x" * 129,
]


@pytest.mark.parametrize("device", KEPT)
def test_names_vllm_keys_are_device_names(device: str) -> None:
    assert is_device_name(device)
    _check_device_name(device)  # the store takes them too


@pytest.mark.parametrize("device", REFUSED)
def test_names_vllm_cannot_key_are_refused(device: str) -> None:
    assert not is_device_name(device)
    with pytest.raises(ValueError, match="must be vLLM's key"):
        _check_device_name(device)


def test_a_device_argument_may_hold_the_gpus_spaces() -> None:
    assert DEVICE_NAME_MAX == 128
    assert re.fullmatch(DEVICE_ARG_PATTERN, "NVIDIA L20")
    assert not re.fullmatch(DEVICE_ARG_PATTERN, "sl/ash")
    assert not re.fullmatch(DEVICE_ARG_PATTERN, "x" * 129)
