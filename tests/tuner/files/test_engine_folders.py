"""The table of engine folders by release: exact folders per release, release numbers and
Triton folders."""

from __future__ import annotations

import pytest

from tests.storefill import FAST
from tuner.files.engine_folders import (
    folder_for,
    triton_folder,
    version_key,
)
from tuner.kernels.registry import FAMILIES

ENTRY = {**FAST, "BLOCK_SIZE_N": 128}


SGL_MOE = "sglang/srt/layers/moe/"


# The other rows, through the mount lines: tests/tuner/files/test_mounts.py.
@pytest.mark.parametrize(
    ("engine", "family", "version", "folder"),
    [
        ("vllm", "moe", None, "vllm/model_executor/layers/fused_moe/configs"),
        ("sglang", "dense", "0.5.21", "sglang/kernels/ops/gemm/configs"),
        ("sglang", "moe", "0.5.11", f"{SGL_MOE}moe_runner/triton_utils/configs/triton_3_8_0"),
    ],
)
def test_folder_of_each_release(engine: str, family: str, version: str | None, folder: str) -> None:
    assert folder_for(engine, family, version, "3.8.0") == folder


def test_the_families_have_one_row_per_engine_family_and_first_version() -> None:
    rows = [
        (family.name, row) for family in FAMILIES.values() for row in family.files.engine_folders
    ]
    keys = [(row.engine, name, version_key(row.first_version)) for name, row in rows]
    assert len(keys) == len(set(keys))
    # Every engine that reads a family's files has a row for every release ("0").
    firsts = {(row.engine, name) for name, row in rows if row.first_version == "0"}
    assert firsts == {(row.engine, name) for name, row in rows}


def test_versions_sort_as_releases_and_triton_names_its_folder() -> None:
    assert version_key("0.5.15.post1") > version_key("0.5.15") > version_key("0.5.14")
    assert version_key("v0.33.0") == version_key("0.33.0") == version_key("0.33.0+cu130")
    assert version_key("0.34.0.dev3+g1a2b") == version_key("0.34.0") > version_key("0.33.9")
    for bad in ("", "latest", "1..2", "0.5.23;rm"):
        with pytest.raises(ValueError, match="is not a release number like 0.5.23"):
            version_key(bad)
    assert triton_folder("3.8.0") == "triton_3_8_0"
    for bad in ("3.8", "3.8.0+git1", "3.8.0rc1", "../3.8.0"):
        with pytest.raises(ValueError, match="is not like 3.8.0"):
            triton_folder(bad)
