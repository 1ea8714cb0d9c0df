"""The kernel-family seam: the dense GEMM through it, and a second family that only registers
itself, tuned by the worker and merged into its own files with no change elsewhere."""

from __future__ import annotations

import dataclasses
import io
import re
import subprocess
import sys
import zipfile

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from api.app import create_app
from api.settings import Settings
from db import repo
from db.connection import session_scope
from tests.storefill import run_one_task
from tuner.cli import app as cli
from tuner.files.device import device_files
from tuner.files.mounts import MountRequest, config_files_in, render_mounts
from tuner.files.pull import render_pull_recipe
from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.family import DENSE
from tuner.kernels.dense.naming import config_file_name
from tuner.kernels.dense.space import default_config, vllm_space
from tuner.kernels.dense.specialization import specialization_key
from tuner.kernels.family import EXPERTS, LINEAR_LAYERS, KernelFamily
from tuner.kernels.moe.family import MOE
from tuner.kernels.registry import (
    FAMILIES,
    family_of_file,
    family_of_part,
    get_family,
    respell_file_name,
)
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
    assert DENSE.files.file_name(shape, "NVIDIA_L20", "sglang").endswith(
        "block_shape=[128, 128].json"
    )
    assert DENSE.files.parse_file_name(name) == (shape, "NVIDIA_L20", "fp8_w8a8")
    assert DENSE.space() == vllm_space() and len(DENSE.space()) == 1280
    assert {DENSE.default_config(shape, M) for M in (1, 16, 4096)} == {default_config()}
    assert (
        DENSE.why_invalid(KernelConfig(64, 128, 256, 32, 4, 2), shape)
        == "BLOCK_SIZE_K=256 does not divide group_k=128"
    )
    assert DENSE.specialization(shape, 1) == specialization_key(1, 5120, 3072, (128, 128))
    assert DENSE.module_path(DENSE.kernel_module).name == "kernel.py"


def test_a_file_names_its_family_by_the_family_that_parses_it() -> None:
    dense = config_file_name(5120, 3072, "NVIDIA_L20")
    moe = "E=128,N=384,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json"
    assert family_of_file(dense) is DENSE and family_of_file(moe) is MOE
    assert family_of_file(dense.replace("[128,128]", "[128, 128]")) is DENSE
    # A name no family parses gets the parse error of the family its start names.
    with pytest.raises(ValueError, match=r"^'config.json' is not a config file name like 'N="):
        family_of_file("config.json")
    with pytest.raises(ValueError, match=r"^'E=8,N=1\.json' is not a block-FP8 MoE config"):
        family_of_file("E=8,N=1.json")


def test_shape_params_round_trip_through_the_store_text() -> None:
    shape = Shape.from_store(384, 2048, [128, 128], "top_k=8,E=128")
    assert shape.params == (("E", 128), ("top_k", 8)) and shape.param("E") == 128
    assert shape.params_text == "E=128,top_k=8"
    assert Shape.from_store(1, 2, (128, 128)).params_text == ""
    with pytest.raises(ValueError, match="not name=value pairs"):
        Shape.from_store(1, 2, (128, 128), "E128")


def test_a_family_shape_reads_and_writes_the_store_columns_and_sorts_as_files_do() -> None:
    moe = FamilyShape.of_row(
        dataclasses.make_dataclass("Row", ["family", "shape_params", "N", "K", "block_shape"])(
            "moe", "top_k=8,E=128", 384, 2048, [128, 128]
        )
    )
    assert moe == FamilyShape("moe", Shape(384, 2048, (128, 128), (("E", 128), ("top_k", 8))))
    assert moe.store_fields() == {"family": "moe", "shape_params": "E=128,top_k=8"}
    assert store_columns("moe", (("top_k", 8), ("E", 64))) == {
        "family": "moe",
        "shape_params": "E=64,top_k=8",
    }
    # A row without family columns (an import) is the dense GEMM's.
    dense = FamilyShape.of_row(
        dataclasses.make_dataclass("Imported", ["N", "K", "block_shape"])(7168, 2048, (128, 128))
    )
    assert dense == FamilyShape(
        "dense", Shape(7168, 2048, (128, 128))
    ) and dense.store_fields() == {
        "family": "dense",
        "shape_params": "",
    }
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
        assert str(refused.value) == (
            f"the {family.name} family needs a block shape [group_n, group_k]; "
            "N=512 K=256 has none (per-tensor)"
        )


def test_the_registry_loads_no_torch() -> None:
    code = (
        "import sys, tuner.kernels.registry, tuner.files.device; "
        "assert 'torch' not in sys.modules and 'triton' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def _toy_default(shape: Shape, M: int) -> KernelConfig:
    return KernelConfig(16 if M <= 16 else 64, 128, 128, 1, 4, 2)


_TOY_NAME = re.compile(r"toy,E=(\d+),N=(\d+),K=(\d+),device_name=([A-Za-z0-9_]+)\.json")


def _toy_parse(name: str) -> tuple[Shape, str, str]:
    match = _TOY_NAME.fullmatch(name)
    if match is None:
        raise ValueError(f"{name!r} is not a toy file name")
    E, N, K, device = match.groups()
    return Shape(int(N), int(K), (128, 128), (("E", int(E)),)), device, "fp8_w8a8"


# A second family that registers itself and changes nothing else: the dense kernel under
# another name, file name (and its parser) and an M-dependent default, with a dimension beyond
# N and K.
TOY = dataclasses.replace(
    DENSE,
    name="toy",
    title="the dense kernel as a second family",
    default_config=_toy_default,
    files=dataclasses.replace(
        DENSE.files,
        file_name=lambda shape, device, engine: (
            f"toy,{shape.params_text},N={shape.N},K={shape.K},device_name={device}.json"
        ),
        parse_file_name=_toy_parse,
        file_name_start="toy,",
        respell_file_name=None,
    ),
    shapes=dataclasses.replace(
        DENSE.shapes,
        sweep_key_has_family=True,
    ),
)
SPACE = [KernelConfig(32, 64, 128, 1, 4, 2), KernelConfig(16, 128, 64, 1, 4, 2)]


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> KernelFamily:
    monkeypatch.setitem(FAMILIES, "toy", TOY)
    return TOY


def test_a_registered_family_is_tuned_stored_and_merged(tmp_path, toy) -> None:
    engine, task = run_one_task(
        f"sqlite:///{tmp_path}/tuner.db",
        model="toy",
        family="toy",
        shape_params="E=2",
        shape=(128, 128),
        M=2,
        space=SPACE,
    )
    assert (task.family, task.shape_params) == ("toy", "E=2")
    with session_scope(engine) as session:
        trials = repo.task_trials(session, task_id=task.task_id)
        read = device_files(
            session, "TRITON_INTERPRETER", out_dtype=None, allow_stale=True, allow_partial=False
        )
    engine.dispose()
    defaults = [KernelConfig.from_dict(t.config) for t in trials if t.is_default]
    assert defaults == [_toy_default(Shape(128, 128, (128, 128)), 2)]  # the family's default at M=2
    assert {KernelConfig.from_dict(t.config) for t in trials} == {*SPACE, defaults[0]}
    assert all(t.status == "ok" and t.rel_error < 1e-2 for t in trials)  # the real kernel ran
    (file,) = read.files.files
    assert file.file_name == "toy,E=2,N=128,K=128,device_name=TRITON_INTERPRETER.json"
    assert (file.family, file.key.shape.params_text, list(file.merged.configs)) == (
        "toy",
        "E=2",
        [2],
    )
    assert KernelConfig.from_dict(file.merged.configs[2]) in {*SPACE, defaults[0]}


TOY_FILE = "toy,E=2,N=128,K=128,device_name=TRITON_INTERPRETER.json"


def test_a_registered_family_goes_through_export_and_the_file_routes(tmp_path, toy) -> None:
    """No layer outside tuner/kernels knows the toy family, yet its file is exported, found by
    name over HTTP (either spelling) and in the device's archive."""
    url = f"sqlite:///{tmp_path}/tuner.db"
    engine, _ = run_one_task(
        url, model="toy", family="toy", shape_params="E=2", shape=(128, 128), M=2, space=SPACE
    )
    with session_scope(engine) as session:
        text = (
            device_files(
                session, "TRITON_INTERPRETER", out_dtype=None, allow_stale=True, allow_partial=False
            )
            .files.files[0]
            .merged.text
        )
    engine.dispose()
    assert family_of_file(TOY_FILE) is TOY
    assert respell_file_name(TOY_FILE, "sglang") == TOY_FILE
    exported = CliRunner().invoke(
        cli.app,
        [
            "export",
            "--device",
            "interpreter",
            "--out",
            str(tmp_path / "out"),
            "--allow-stale",
            "--db",
            url,
        ],
    )
    assert exported.exit_code == 0, exported.output
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [TOY_FILE]
    assert (tmp_path / "out" / TOY_FILE).read_text() == text
    with TestClient(create_app(Settings(db_url=url))) as client:
        base = "/devices/TRITON_INTERPRETER/preview/configs"
        served = client.get(f"{base}/{TOY_FILE}", params={"allow_stale": True})
        assert served.status_code == 200, served.text
        assert served.text == text
        missing = client.get(
            f"{base}/{TOY_FILE.replace('E=2', 'E=3')}", params={"allow_stale": True}
        )
        assert missing.status_code == 404
        assert missing.json()["detail"] == (
            f"no file {TOY_FILE.replace('E=2', 'E=3')!r} for TRITON_INTERPRETER; files: {TOY_FILE}"
        )
        archive = client.get(f"{base}.zip", params={"allow_stale": True})
        assert archive.status_code == 200
        with zipfile.ZipFile(io.BytesIO(archive.content)) as zipped:
            assert zipped.read(TOY_FILE).decode() == text


def test_a_registered_familys_files_are_mounted_and_pulled(toy) -> None:
    site = "/usr/local/lib/python3.12/dist-packages"
    target = f"{site}/vllm/model_executor/layers/quantization/utils/configs/{TOY_FILE}"
    assert config_files_in([TOY_FILE, "config.json"], "TRITON_INTERPRETER") == [TOY_FILE]
    mounts = render_mounts(
        MountRequest(
            device_name="TRITON_INTERPRETER",
            engine="vllm",
            file_names=(TOY_FILE,),
            host_dir="/srv/configs",
            site_packages=site,
            fmt="k8s",
            contents={TOY_FILE: "{}\n"},
        )
    ).splitlines()
    assert "  e2-n128-k128-b128x128.json: |" in mounts  # the ConfigMap's key for the file
    assert f"  mountPath: {target}" in mounts
    release = {
        "device_name": "TRITON_INTERPRETER",
        "number": 1,
        "content_sha256": "ab" * 32,
        "files": [{"file_name": TOY_FILE, "sha256": "1" * 64}],
    }
    pulled = render_pull_recipe(
        "k8s-pull", server="http://tuner:8000", release=release, engine="vllm", site_packages=site
    ).splitlines()
    assert f"  mountPath: {target}" in pulled
