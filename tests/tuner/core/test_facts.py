"""Each fact of tuner.core against its real source (vLLM 0.33.0's code, the store's columns and
checks, the kernels' torch dtypes, the CLI's choices), so that no copy can drift from it."""

from __future__ import annotations

import dataclasses
import hashlib
import re

import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

from db.models import Base, ComparisonPoint, Decision, Retime, Trial
from db.work import get_or_create_device
from tuner.cli.arguments import DEFAULT_M, parse_m_values
from tuner.core import (
    CONFIG_KEYS,
    DEFAULT_OUT_DTYPE,
    DEVICE_ARG_PATTERN,
    INTERPRETER_DEVICE_NAME,
    OUT_DTYPES,
    REQUIRED_M,
    VLLM_M_GRID,
    ComparisonStatus,
    OutDtype,
    TrialStatus,
    is_device_name,
    minor_of,
    triton_minor,
    vllm_device_name,
)
from tuner.core.hashing import kernel_source_hash
from tuner.kernels.config import KernelConfig

CONFIG = dict.fromkeys(CONFIG_KEYS, 16)


@pytest.mark.parametrize(
    ("gpu_name", "key"),
    [
        ("AMD Instinct MI300X/MI308X", "AMD_Instinct_MI300X_MI308X"),  # '/' would be a subfolder
        ("Intel(R) Data Center GPU  Max\t1550", "Intel(R)_Data_Center_GPU_Max_1550"),  # a run: '_'
        ("  NVIDIA L20 ", "NVIDIA_L20"),  # a typed name loses its outer spaces only
        ("a / b", "a_b"),
    ],
)
def test_the_device_name_rule_is_vllms(gpu_name: str, key: str) -> None:
    """Besides the names real GPUs report, run through vLLM's own rule from its wheel
    (tests/engines/test_device_names.py)."""
    assert vllm_device_name(gpu_name) == key and is_device_name(key)


KEPT = ["Intel(R)_Arc(TM)_Pro_B70_Graphics", "Odd,name=[x]:y;z", "a.b", INTERPRETER_DEVICE_NAME]
REFUSED = ["", "has space", 'quote"d', "sl/ash", "back\\slash", "dot..dot", ".", "tab\tx"]


@pytest.mark.parametrize("device", [*KEPT, "x" * 128, *REFUSED, "caf\u00e9", "x" * 129])
def test_vllms_keys_are_device_names_and_the_store_takes_exactly_those(device: str) -> None:
    kept = device in KEPT or device == "x" * 128
    assert is_device_name(device) is kept
    engine = create_engine("sqlite://")
    Base.metadata.create_all(engine)
    with Session(engine) as session:
        if kept:
            assert get_or_create_device(session, device_name=device) == 1
        else:
            with pytest.raises(ValueError, match="must be vLLM's key"):
                get_or_create_device(session, device_name=device)


def test_a_device_argument_may_hold_the_gpus_spaces() -> None:
    assert re.fullmatch(DEVICE_ARG_PATTERN, "NVIDIA L20")
    assert not re.fullmatch(DEVICE_ARG_PATTERN, "sl/ash")
    assert not re.fullmatch(DEVICE_ARG_PATTERN, "x" * 129)


def test_the_m_grid_and_config_keys_are_vllms() -> None:
    """The grid's values: vLLM's pick between its keys (tests/tuner/files/test_format_merge.py)
    and REQUIRED_M, the M a file needs (its partial-file test there)."""
    assert parse_m_values(DEFAULT_M) == VLLM_M_GRID  # `tuner sweep --m`'s default
    assert set(REQUIRED_M) <= set(VLLM_M_GRID)
    keys = "BLOCK_SIZE_M BLOCK_SIZE_N BLOCK_SIZE_K GROUP_SIZE_M num_warps num_stages".split()
    assert list(CONFIG_KEYS) == keys == [f.name for f in dataclasses.fields(KernelConfig)]
    assert list(KernelConfig.from_dict(CONFIG).as_dict()) == keys


@pytest.mark.parametrize("table", [Trial, Retime, Decision])
def test_the_stores_config_columns_are_the_config_keys(table) -> None:
    columns = [column.name for column in table.__table__.columns]
    assert [name for name in columns if name in CONFIG_KEYS] == list(CONFIG_KEYS)


def test_statuses_are_the_stored_values() -> None:
    stored = "ok invalid compile_error out_of_resources wrong_result timeout crashed".split()
    assert list(TrialStatus) == stored
    with pytest.raises(ValueError, match="'oom' is not a valid TrialStatus"):
        TrialStatus("oom")  # what the store's record_trial raises
    assert tuple(ComparisonStatus) == ("ok", "failed", "unavailable")
    checks = [str(getattr(c, "sqltext", "")) for c in ComparisonPoint.__table__.constraints]
    assert "status IN ('ok', 'failed', 'unavailable')" in checks


def test_out_dtypes_are_torchs_names_of_the_kernels_dtypes_and_the_stores() -> None:
    import torch

    assert OUT_DTYPES == ("bfloat16", "float16") and DEFAULT_OUT_DTYPE == "bfloat16"
    assert tuple(OutDtype) == OUT_DTYPES  # `--out-dtype`'s choices
    # The runner makes the kernels' output with torch's dtype of that name.
    assert tuple(getattr(torch, name) for name in OUT_DTYPES) == (torch.bfloat16, torch.float16)
    # The store's: tests/db/test_work.py refuses 'float32' naming bfloat16, float16.


@pytest.mark.parametrize(
    ("version", "minor"),
    [
        ("3.6.0", (3, 6)),
        ("3.6.1+git3f2a", (3, 6)),
        ("3.10", (3, 10)),
        (" 3.9.0 ", (3, 9)),
        ("03.06.0", (3, 6)),
        ("3.8.0rc1", (3, 8)),
        *((bad, None) for bad in ("3", "three.six", "", "36", "3.6 beta", "v3.6")),
    ],
)
def test_triton_minor(version: str, minor: tuple[int, int] | None) -> None:
    assert minor_of(version) == minor
    if minor is None:
        with pytest.raises(ValueError, match="is not a version such as 3.6.0"):
            triton_minor(version)
    else:
        assert triton_minor(version) == f"{minor[0]}.{minor[1]}"


def test_the_kernels_record_the_sha256_of_their_source_text() -> None:
    text = "@triton.jit\ndef k(x):  # \u00e9\n    pass\n"
    assert kernel_source_hash(text) == hashlib.sha256(text.encode("utf-8")).hexdigest()
