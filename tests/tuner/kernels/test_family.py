"""The kernel-family seam: the dense GEMM through it, and a second family that only registers
itself, tuned by the worker and merged into its own files with no change elsewhere."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from db import repo
from db.engine import session_scope
from tests.storefill import run_one_task
from tuner.files.device import device_files
from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.family import DENSE
from tuner.kernels.dense.naming import config_file_name
from tuner.kernels.dense.space import default_config, vllm_space
from tuner.kernels.dense.specialization import specialization_key
from tuner.kernels.family import KernelFamily, Shape
from tuner.kernels.moe.family import MOE
from tuner.kernels.registry import FAMILIES, family_of_file, get_family


def test_the_dense_gemm_is_the_registered_family() -> None:
    assert get_family("dense") is DENSE and list(FAMILIES) == ["dense", "moe"]
    with pytest.raises(ValueError, match=r"unknown kernel family 'toy'; known: dense \(W8A8"):
        get_family("toy")


def test_the_dense_family_gives_vllms_names_space_and_default() -> None:
    shape = Shape(5120, 3072)
    name = config_file_name(5120, 3072, "NVIDIA_L20")
    assert DENSE.file_name(shape, "NVIDIA_L20", "vllm") == name
    assert DENSE.file_name(shape, "NVIDIA_L20", "sglang").endswith("block_shape=[128, 128].json")
    assert DENSE.parse_file_name(name) == (shape, "NVIDIA_L20", "fp8_w8a8")
    assert DENSE.space() == vllm_space() and len(DENSE.space()) == 1280
    assert {DENSE.default_config(shape, M) for M in (1, 16, 4096)} == {default_config()}
    assert DENSE.why_invalid(KernelConfig(64, 128, 256, 32, 4, 2), shape) == \
        "BLOCK_SIZE_K=256 does not divide group_k=128"
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


def test_the_registry_loads_no_torch() -> None:
    code = ("import sys, tuner.kernels.registry, tuner.files.device; "
            "assert 'torch' not in sys.modules and 'triton' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def _toy_default(shape: Shape, M: int) -> KernelConfig:
    return KernelConfig(16 if M <= 16 else 64, 128, 128, 1, 4, 2)


# A second family that registers itself and changes nothing else: the dense kernel under
# another name, file name and an M-dependent default, with a dimension beyond N and K.
TOY = dataclasses.replace(
    DENSE, name="toy", title="the dense kernel as a second family",
    default_config=_toy_default,
    file_name=lambda shape, device, engine: (f"toy,{shape.params_text},N={shape.N},K={shape.K},"
                                             f"device_name={device}.json"),
)
SPACE = [KernelConfig(32, 64, 128, 1, 4, 2), KernelConfig(16, 128, 64, 1, 4, 2)]


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> KernelFamily:
    monkeypatch.setitem(FAMILIES, "toy", TOY)
    return TOY


def test_a_registered_family_is_tuned_stored_and_merged(tmp_path, toy) -> None:
    engine, task = run_one_task(f"sqlite:///{tmp_path}/tuner.db", model="toy", family="toy",
                                shape_params="E=2", shape=(128, 128), M=2, space=SPACE)
    assert (task.family, task.shape_params) == ("toy", "E=2")
    with session_scope(engine) as session:
        trials = repo.task_trials(session, task_id=task.task_id)
        read = device_files(session, "TRITON_INTERPRETER", out_dtype=None, allow_stale=True,
                            allow_partial=False)
    engine.dispose()
    defaults = [KernelConfig.from_dict(t.config) for t in trials if t.is_default]
    assert defaults == [_toy_default(Shape(128, 128), 2)]  # the family's default at M=2
    assert {KernelConfig.from_dict(t.config) for t in trials} == {*SPACE, defaults[0]}
    assert all(t.status == "ok" and t.rel_error < 1e-2 for t in trials)  # the real kernel ran
    (file,) = read.files.files
    assert file.file_name == "toy,E=2,N=128,K=128,device_name=TRITON_INTERPRETER.json"
    assert (file.family, file.shape_params, list(file.merged.configs)) == ("toy", "E=2", [2])
    assert KernelConfig.from_dict(file.merged.configs[2]) in {*SPACE, defaults[0]}
