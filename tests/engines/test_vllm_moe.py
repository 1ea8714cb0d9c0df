"""vLLM 0.33.0's own fused-MoE lookup on files the tuner exports (from VLLM_TUNED_CONFIG_FOLDER,
where `tuner mounts` points it, and from the package's configs folder), its file names against
`tuner.kernels.moe.family`, and its `get_default_config` against
`tuner.kernels.moe.space.default_config` for every M from 1 to 8,192 of every packaged MoE model
at every TP its shapes file lists."""

from __future__ import annotations

import json
from pathlib import Path

from tests.engines.container import Container, Logged, Platform, tuned_files
from tests.engines.vllm_host import MOE_CONFIGS, moe_lookup
from tests.storefill import TRITON
from tuner.core import VLLM_M_GRID, vllm_device_name
from tuner.files.format import dump_config_file, parse_config_file, vllm_pick_key
from tuner.inputs.shapes import known_models, load_shapes, tp_sizes
from tuner.kernels.moe.family import MOE, moe_config_file_name
from tuner.kernels.shape import Shape

GPU = "NVIDIA H200 NVL"
DEVICE = "NVIDIA_H200_NVL"
# The device part the exported names carry (every H200 is NVIDIA_H200 in vLLM's MoE names);
# `tuner mounts --files` finds a folder's files by it.
FILE_DEVICE = "NVIDIA_H200"
M_MAX = 8192
BLOCK_SHAPE = [128, 128]
SHAPES = [
    ("moe", "E=128,top_k=8", 384, 2048, VLLM_M_GRID),
    ("moe", "E=8,top_k=2", 64, 128, (1, 64, 1024)),
]
MOE_GPUS = [
    "NVIDIA H200",
    "NVIDIA H200 NVL",
    "NVIDIA GH200 480GB",
    "NVIDIA H100 80GB HBM3",
    "NVIDIA L20",
    "NVIDIA B200",
]


def _container(vllm_wheel: Path, tmp_path: Path) -> Container:
    container = Container(tmp_path / "container")
    container.install(vllm_wheel, MOE_CONFIGS)
    return container


def _picks(vllm, E: int, N: int, K: int, top_k: int) -> list[dict]:
    """What vLLM runs at M = 1..M_MAX for this expert shape (w1 [E, 2N, K], w2 [E, K, N])."""
    return [
        vllm.try_get_optimal_moe_config(
            (E, 2 * N, K), (E, K, N), top_k, "fp8_w8a8", M, block_shape=BLOCK_SHAPE
        )
        for M in range(1, M_MAX + 1)
    ]


def _expected(configs: dict[int, dict]) -> list[dict]:
    return [configs[vllm_pick_key(configs, M)] for M in range(1, M_MAX + 1)]


def test_vllm_reads_the_tuned_folder_the_mounts_set_before_its_own(
    vllm_wheel, tmp_path, monkeypatch
) -> None:
    files = tuned_files(DEVICE, SHAPES)
    container = _container(vllm_wheel, tmp_path)
    # Without the variable vLLM reads the package's file, as it reads the files it ships.
    shipped = {1: MOE.default_config(files[1].key.shape, 1).as_dict()}
    package_file = Path(container.module_file(f"{MOE_CONFIGS}/{files[1].file_name}"))
    package_file.write_text(dump_config_file(shipped, TRITON))
    container.apply(monkeypatch)
    vllm = moe_lookup(vllm_wheel, monkeypatch, container, Platform(GPU), Logged())
    assert _picks(vllm, 8, 64, 128, 2) == [shipped[1]] * M_MAX
    # With the mounts' folder set, vLLM reads ours first.
    compose = container.mount(files, FILE_DEVICE, "vllm", tmp_path / "host")
    container.apply(monkeypatch)
    folder = container.environment["VLLM_TUNED_CONFIG_FOLDER"]
    assert [v["target"] for v in compose["volumes"]] == [
        compose["environment"]["VLLM_TUNED_CONFIG_FOLDER"]
    ]
    logger = Logged()
    vllm = moe_lookup(vllm_wheel, monkeypatch, container, Platform(GPU), logger)
    for file in files:
        E, top_k = file.key.shape.param("E"), file.key.shape.param("top_k")
        assert list(json.loads(file.merged.text))[0] == "triton_version"  # popped by vLLM
        configs = parse_config_file(file.merged.text)
        assert _picks(vllm, E, file.N, file.K, top_k) == _expected(configs), file.file_name
        assert logger.records.pop() == (
            "info_once",
            (f"Using configuration from {folder}/{file.file_name} for MoE layer."),
        )
    assert logger.records == []


def test_file_names_are_vllms_with_the_h200_rule(vllm_wheel, monkeypatch, tmp_path) -> None:
    platform = Platform(MOE_GPUS[0])
    vllm = moe_lookup(vllm_wheel, monkeypatch, Container(tmp_path), platform, Logged())
    rule = vllm.get_device_name_as_file_name
    names = {}
    for gpu in MOE_GPUS:
        platform.gpu_name = gpu
        rule.cache_clear()
        shape = Shape(384, 2048, (128, 128), (("E", 128), ("top_k", 8)))
        theirs = vllm.get_config_file_name(128, 384, "fp8_w8a8", BLOCK_SHAPE)
        ours = MOE.files.file_name(shape, vllm_device_name(gpu), "vllm")
        assert theirs == ours == moe_config_file_name(128, 384, vllm_device_name(gpu)), gpu
        names[gpu] = theirs.split(",")[2]
    assert names == {
        "NVIDIA H200": "device_name=NVIDIA_H200",
        "NVIDIA H200 NVL": "device_name=NVIDIA_H200",
        "NVIDIA GH200 480GB": "device_name=NVIDIA_GH200_480GB",
        "NVIDIA H100 80GB HBM3": "device_name=NVIDIA_H100_80GB_HBM3",
        "NVIDIA L20": "device_name=NVIDIA_L20",
        "NVIDIA B200": "device_name=NVIDIA_B200",
    }


def _packaged_moe_shapes() -> list[tuple[str, int, tuple[int, int, int, int], tuple[int, int]]]:
    """(model, TP, (E, N, K, top_k), block_shape) of every MoE shape the packaged files list."""
    found = []
    for model in known_models():
        for tp in tp_sizes(model):
            shapes = load_shapes(model, tp)
            found += [
                (model, tp, (s.param("E"), s.N, s.K, s.param("top_k")), shapes.block_shape)
                for s in shapes.of("moe")
            ]
    return found


def test_vllms_default_is_ours_at_every_m_of_every_packaged_moe_model(
    vllm_wheel, tmp_path, monkeypatch
) -> None:
    packaged = _packaged_moe_shapes()
    assert {model for model, *_ in packaged} == {"deepseek-v3", "qwen3-30b-a3b-fp8", "tiny-moe"}
    container = _container(vllm_wheel, tmp_path)
    container.apply(monkeypatch)
    # A device vLLM ships no MoE file for: every lookup falls through to get_default_config.
    logger = Logged()
    vllm = moe_lookup(vllm_wheel, monkeypatch, container, Platform("NVIDIA L40S"), logger)
    wrong = []
    for model, tp, (E, N, K, top_k), block_shape in packaged:
        shape = Shape(N, K, block_shape, (("E", E), ("top_k", top_k)))
        for M, theirs in enumerate(_picks(vllm, E, N, K, top_k), start=1):
            ours = MOE.default_config(shape, M).as_dict()
            if theirs != {**ours, "SPLIT_K": 1}:
                wrong.append((model, tp, M, theirs, ours))
    assert wrong == [], f"{len(wrong)} (model, TP, M) differ, first {wrong[:2]}"
    names = {moe_config_file_name(E, N, "NVIDIA_L40S") for _, _, (E, N, _, _), _ in packaged}
    assert len(logger.records) == len(names)
    assert {method for method, _ in logger.records} == {"warning_once"}
    assert all(text.startswith("Using default MoE config.") for _, text in logger.records)
