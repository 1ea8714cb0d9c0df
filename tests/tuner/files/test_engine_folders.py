"""The table of engine folders by release: exact folders per release and Triton folders."""

from __future__ import annotations

import pytest
from packaging.version import Version

from tuner.files.engine_folders import folder_for, triton_folder
from tuner.kernels.registry import FAMILIES

SGL_MOE = "sglang/srt/layers/moe/"


# The default releases' rows, through the mount lines: tests/tuner/files/test_mounts.py.
@pytest.mark.parametrize(
    ("engine", "family", "version", "folder"),
    [
        ("vllm", "moe", None, "vllm/model_executor/layers/fused_moe/configs"),
        ("sglang", "dense", "0.5.21", "sglang/kernels/ops/gemm/configs"),
        ("sglang", "dense", "0.5.20", "sglang/kernels/ops/quantization/configs"),
        ("sglang", "dense", "0.5.15.post1", "sglang/srt/layers/quantization/configs"),
        ("sglang", "moe", "0.5.11", f"{SGL_MOE}moe_runner/triton_utils/configs/triton_3_8_0"),
        ("sglang", "moe", "0.5.10.post1", f"{SGL_MOE}fused_moe_triton/configs/triton_3_8_0"),
    ],
)
def test_folder_of_each_release(engine: str, family: str, version: str | None, folder: str) -> None:
    assert folder_for(engine, family, version, "3.8.0") == folder


def test_the_families_have_one_row_per_engine_family_and_first_version() -> None:
    rows = [
        (family.name, row) for family in FAMILIES.values() for row in family.files.engine_folders
    ]
    keys = [(row.engine, name, Version(row.first_version)) for name, row in rows]
    assert len(keys) == len(set(keys))
    # Every engine that reads a family's files has a row for every release ("0").
    firsts = {(row.engine, name) for name, row in rows if row.first_version == "0"}
    assert firsts == {(row.engine, name) for name, row in rows}


def test_triton_names_its_folder() -> None:
    assert triton_folder("3.8.0") == "triton_3_8_0"
    for bad in ("3.8", "3.8.0+git1", "3.8.0rc1", "../3.8.0"):
        with pytest.raises(ValueError, match="is not like 3.8.0"):
            triton_folder(bad)
