"""SGLang 0.5.23's own loaders on files the tuner exports with `--engine sglang`, laid out
exactly where `tuner mounts --engine sglang` puts them (on top of the files SGLang ships): at
every M from 1 to 8,192 SGLang runs the entry the tuner's nearest-M rule names, with no
warning (no default, no other Triton's folder, no BLOCK_SIZE_K raised)."""

from __future__ import annotations

from tests.engines.container import Container, Logged, tuned_files
from tests.engines.sglang_host import (
    DENSE_CONFIGS,
    MOE_CONFIGS,
    dense_lookup,
    launch_dense,
    moe_lookup,
)
from tests.storefill import TRITON
from tuner.core import VLLM_M_GRID
from tuner.files.format import parse_config_file, vllm_pick_key
from tuner.kernels.target import Capture

M_MAX = 8192
DENSE_SHAPES = [
    ("dense", "", 5120, 3072, VLLM_M_GRID),
    ("dense", "", 7168, 5120, (16, 32, 2048, 4096)),
]
MOE_SHAPES = [
    ("moe", "E=128,top_k=8", 384, 2048, VLLM_M_GRID),
    ("moe", "E=8,top_k=2", 64, 128, (1, 64, 1024)),
]


def _expected(text: str) -> list[dict]:
    configs = parse_config_file(text)
    return [configs[vllm_pick_key(configs, M)] for M in range(1, M_MAX + 1)]


def _mounted(wheel, folder: str, device_name: str, shapes, tmp_path, monkeypatch, triton=None):
    """The files `tuner export --engine sglang` writes for `shapes`, and a container with
    SGLang's shipped files of `folder` and those files mounted on them (`triton`: the serving
    image's Triton)."""
    files = tuned_files(device_name, shapes, engine="sglang")
    container = Container(tmp_path / "container")
    container.install(wheel, folder)
    container.mount(files, device_name, "sglang", tmp_path / "host", triton)
    container.apply(monkeypatch)
    return files, container


def _warnings(logger: Logged) -> str:
    """SGLang's warnings, one per line ("" for none): where it looked when it read no file."""
    return "\n".join(text for method, text in logger.records if method != "info")


def test_sglang_runs_the_dense_files_where_the_mounts_put_them(
    sglang_wheel, tmp_path, monkeypatch
) -> None:
    files, container = _mounted(
        sglang_wheel, DENSE_CONFIGS, "NVIDIA_H200", DENSE_SHAPES, tmp_path, monkeypatch
    )
    assert all("block_shape=[128, 128]" in file.file_name for file in files)
    logger, kernel = Logged(), Capture()
    sglang = dense_lookup(sglang_wheel, container, "NVIDIA H200", logger, kernel)
    for file in files:
        launched = [launch_dense(sglang, kernel, M, file.N, file.K) for M in range(1, M_MAX + 1)]
        assert not _warnings(logger), f"{file.file_name}: SGLang: {_warnings(logger)}"
        assert launched == _expected(file.merged.text), file.file_name
    assert len(logger.records) == len(files)


def test_sglang_runs_the_moe_files_where_the_mounts_put_them(
    sglang_wheel, tmp_path, monkeypatch
) -> None:
    # SGLang names MoE files by the device as torch names it: no H200 folding.
    # A folder of files carries no Triton version: the serving image's is given.
    files, container = _mounted(
        sglang_wheel,
        MOE_CONFIGS,
        "NVIDIA_H200_NVL",
        MOE_SHAPES,
        tmp_path,
        monkeypatch,
        TRITON,
    )
    assert all("device_name=NVIDIA_H200_NVL," in file.file_name for file in files)
    logger = Logged()
    # The Triton the winners were timed with, as the serving image's.
    sglang = moe_lookup(sglang_wheel, monkeypatch, container, "NVIDIA H200 NVL", logger, TRITON)
    for file in files:
        shape = file.key.shape
        E, top_k = shape.param("E"), shape.param("top_k")
        assert sglang.get_config_file_name(E, file.N, "fp8_w8a8", [128, 128]) == file.file_name
        picks = [
            sglang.try_get_optimal_moe_config(
                (E, 2 * file.N, file.K),
                (E, file.K, file.N),
                top_k,
                "fp8_w8a8",
                M,
                block_shape=[128, 128],
            )
            for M in range(1, M_MAX + 1)
        ]
        assert not _warnings(logger), f"{file.file_name}: SGLang: {_warnings(logger)}"
        assert picks == _expected(file.merged.text), file.file_name
    assert [method for method, _ in logger.records] == ["info"] * len(files)
