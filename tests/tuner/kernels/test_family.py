"""The kernel-family seam: the registry, the dense and MoE families through it, and the shape
keys every layer shares (a family that only registers itself: test_proof_family.py)."""

from __future__ import annotations

import dataclasses

import pytest

from tuner.core import CONFIG_KEYS
from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.family import DENSE, config_file_name
from tuner.kernels.dense.space import default_config, vllm_space
from tuner.kernels.family import EXPERTS, LINEAR_LAYERS
from tuner.kernels.moe.family import MOE
from tuner.kernels.registry import FAMILIES, family_of_file, family_of_part, get_family
from tuner.kernels.shape import FamilyShape, Shape, as_block_shape, block_shape_text, store_columns


def test_the_dense_gemm_is_the_registered_family() -> None:
    assert get_family("dense") is DENSE and list(FAMILIES)[:2] == ["dense", "moe"]  # dense first
    assert all(
        get_family(name) is family and family.name == name for name, family in FAMILIES.items()
    )
    with pytest.raises(ValueError, match=r"unknown kernel family 'toy'; known: dense \(W8A8"):
        get_family("toy")


def test_each_part_of_a_model_is_tuned_by_the_family_that_says_so(monkeypatch) -> None:
    assert family_of_part(LINEAR_LAYERS) is DENSE and family_of_part(EXPERTS) is MOE
    assert (DENSE.shapes.model_part, MOE.shapes.model_part) == ("linear layers", "experts")
    # The first registered family of a part answers; a part no family tunes is refused.
    monkeypatch.setitem(FAMILIES, "toy", dataclasses.replace(MOE, name="toy"))
    assert family_of_part(EXPERTS) is MOE
    monkeypatch.setitem(
        FAMILIES,
        "moe",
        dataclasses.replace(MOE, shapes=dataclasses.replace(MOE.shapes, model_part=None)),
    )
    assert family_of_part(EXPERTS).name == "toy"
    with pytest.raises(LookupError, match="no kernel family tunes a model's attention"):
        family_of_part("attention")


def test_the_dense_family_gives_vllms_names_space_and_default() -> None:
    shape = Shape(5120, 3072, (128, 128))
    name = config_file_name(5120, 3072, "NVIDIA_L20")
    assert DENSE.files.file_name(shape, "NVIDIA_L20", "vllm") == name
    sglang = DENSE.files.file_name(shape, "NVIDIA_L20", "sglang")
    assert sglang == name.replace("[128,128]", "[128, 128]")
    assert DENSE.files.parse_file_name(name) == (shape, "NVIDIA_L20", "fp8_w8a8")
    # benchmark_w8a8_block_fp8.py's grid: num_stages outermost, GROUP_SIZE_M innermost.
    space = DENSE.space()
    assert space == vllm_space() and len(space) == 1280 == len(set(space))
    assert space[:2] == [KernelConfig(16, 32, 64, 1, 4, 2), KernelConfig(16, 32, 64, 16, 4, 2)]
    assert space[-1] == KernelConfig(256, 256, 128, 64, 8, 5)
    assert [c for c in space if DENSE.why_invalid(c, shape)] == []
    # vLLM 0.33.0's w8a8_triton_block_scaled_mm default, the same at every M.
    assert {DENSE.default_config(shape, M) for M in (1, 16, 4096)} == {default_config()}
    assert default_config() == KernelConfig(64, 128, 128, 32, 4, 2) and default_config() in space
    assert default_config((64, 64)).BLOCK_SIZE_K == 64


@pytest.mark.parametrize(
    ("config", "reason"),
    [
        (KernelConfig(64, 128, 256, 32, 4, 2), "BLOCK_SIZE_K=256 does not divide group_k=128"),
        (KernelConfig(48, 128, 128, 32, 4, 2), "BLOCK_SIZE_M=48 is not a power of two >= 16"),
        (KernelConfig(64, 8, 128, 32, 4, 2), "BLOCK_SIZE_N=8 is not a power of two >= 16"),
        (KernelConfig(64, 128, 128, 32, 6, 2), "num_warps=6 is not a power of two <= 32"),
    ],
)
def test_constraints_give_their_reason(config: KernelConfig, reason: str) -> None:
    assert DENSE.why_invalid(config, Shape(1, 1, (128, 128))) == reason


def test_a_config_is_read_from_vllms_keys() -> None:
    default = default_config()
    assert KernelConfig.from_dict({**default.as_dict(), "kpack": 2}) == default
    with pytest.raises(ValueError, match="lacks num_stages"):
        KernelConfig.from_dict({k: 1 for k in CONFIG_KEYS[:-1]})
    for key, bad in (("num_warps", True), ("BLOCK_SIZE_M", "64")):
        with pytest.raises(ValueError, match=f"{key} must be a positive integer"):
            KernelConfig.from_dict({**default.as_dict(), key: bad})


def test_a_file_names_its_family_by_the_family_that_parses_it() -> None:
    dense = config_file_name(5120, 3072, "NVIDIA_L20")
    moe = "E=128,N=384,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json"
    assert family_of_file(dense) is DENSE and family_of_file(moe) is MOE
    assert family_of_file(dense.replace("[128,128]", "[128, 128]")) is DENSE
    # A name no family parses gets the default family's parse error.
    with pytest.raises(ValueError, match=r"^'E=8,N=1\.json' is not a config file name like 'N="):
        family_of_file("E=8,N=1.json")


def test_a_family_shape_reads_and_writes_the_store_columns_and_sorts_as_files_do() -> None:
    Row = dataclasses.make_dataclass("Row", ["family", "shape_params", "N", "K", "block_shape"])
    moe = FamilyShape.of_row(Row("moe", "top_k=8,E=128", 384, 2048, [128, 128]))
    assert moe == FamilyShape("moe", Shape(384, 2048, (128, 128), (("E", 128), ("top_k", 8))))
    assert moe.store_fields() == {"family": "moe", "shape_params": "E=128,top_k=8"}
    assert moe.shape.param("E") == 128
    with pytest.raises(ValueError, match="not name=value pairs"):
        Shape.from_store(1, 2, (128, 128), "E128")
    expected = {"family": "moe", "shape_params": "E=64,top_k=8"}
    assert store_columns("moe", (("top_k", 8), ("E", 64))) == expected
    # A row without family columns (an import) is the dense GEMM's.
    Imported = dataclasses.make_dataclass("Imported", ["N", "K", "block_shape"])
    dense = FamilyShape.of_row(Imported(7168, 2048, (128, 128)))
    assert dense == FamilyShape("dense", Shape(7168, 2048, (128, 128)))
    assert dense.store_fields() == {"family": "dense", "shape_params": ""}
    # Files are listed by family, params as stored text ("E=128" before "E=64"), N, K.
    e64 = FamilyShape("moe", Shape(1, 2, (128, 128), (("E", 64),)))
    e128 = FamilyShape("moe", Shape(9, 2, (128, 128), (("E", 128),)))
    assert sorted([e64, e128, dense]) == [dense, e128, e64]


def test_a_shape_without_block_scales_sorts_before_the_pairs() -> None:
    def key(N: int, block_shape: tuple[int, int] | None) -> FamilyShape:
        return FamilyShape("pt", Shape(N, 256, block_shape))

    keys = [key(512, (128, 128)), key(512, None), key(512, (64, 128)), key(256, (128, 128))]
    assert sorted(keys) == [keys[3], keys[1], keys[2], keys[0]]
    assert key(512, None).sort_key == ("pt", "", 512, 256, ())
    shapes = [Shape(1, 2, (128, 128)), Shape(1, 2, None, (("G", 2),)), Shape(1, 2, None)]
    assert sorted(shapes) == [shapes[2], shapes[1], shapes[0]]
    assert Shape(1, 2, None) < Shape(1, 2, (1, 1)) and not Shape(1, 2, None) > Shape(1, 3, None)
    # The store's rows give None (db reads 0/0 as None); JSON gives null or a list.
    assert Shape.from_store(512, 256, None, "G=2") == Shape(512, 256, None, (("G", 2),))
    assert as_block_shape(None) is None and as_block_shape([64, 128]) == (64, 128)
    assert block_shape_text(None) == "per-tensor" and block_shape_text((64, 128)) == "[64, 128]"


def test_the_dense_and_moe_families_need_a_block_shape() -> None:
    per_tensor = Shape(512, 256, None, (("E", 8), ("top_k", 2)))
    for family in (get_family("dense"), get_family("moe")):
        with pytest.raises(ValueError) as refused:
            family.default_config(per_tensor, 16)
        assert str(refused.value) == f"{family.name} needs a block shape; N=512 K=256 has none"
