"""vLLM 0.33.0's own dense lookup on files the tuner exports, mounted where `tuner mounts`
puts them: for every M from 1 to 8,192 the config `w8a8_triton_block_scaled_mm` launches is
the entry `vllm_pick_key` (the tuner's account, used by verify and import) names, and with no
file it is `tuner.kernels.dense.space.default_config()`."""

from __future__ import annotations

from pathlib import Path

from tests.engines.container import Container, Logged, Platform, tuned_files
from tests.engines.vllm_host import DENSE_CONFIGS, dense_lookup, launch_dense
from tuner.core import VLLM_M_GRID
from tuner.files.format import parse_config_file, vllm_pick_key
from tuner.kernels.dense.family import config_file_name
from tuner.kernels.dense.space import default_config
from tuner.kernels.target import Capture

GPU = "NVIDIA L20"
DEVICE = "NVIDIA_L20"
M_MAX = 8192
# vLLM's grid, and a sparse one (wide gaps, ties between keys: M = 24 is as near 16 as 32).
SHAPES = [("dense", "", 5120, 3072, VLLM_M_GRID), ("dense", "", 7168, 5120, (16, 32, 2048, 4096))]


def _mounted(vllm_wheel: Path, tmp_path: Path, monkeypatch, files) -> tuple[Container, dict]:
    container = Container(tmp_path / "container")
    container.install(vllm_wheel, DENSE_CONFIGS)
    compose = container.mount(files, DEVICE, "vllm", tmp_path / "host")
    container.apply(monkeypatch)
    return container, compose


def test_vllm_launches_the_entry_the_tuner_names_at_every_m(
    vllm_wheel, tmp_path, monkeypatch
) -> None:
    files = tuned_files(DEVICE, SHAPES)
    container, compose = _mounted(vllm_wheel, tmp_path, monkeypatch, files)
    targets = {Path(v["target"]).name: v["target"] for v in compose["volumes"]}
    assert sorted(targets) == sorted(f.file_name for f in files)
    logger, kernel = Logged(), Capture()
    vllm = dense_lookup(vllm_wheel, monkeypatch, container, Platform(GPU), logger, kernel)
    for file in files:
        configs = parse_config_file(file.merged.text)
        assert len(set(map(str, configs.values()))) == len(configs)  # each M its own config
        wrong = []
        for M in range(1, M_MAX + 1):
            launched = launch_dense(vllm, kernel, M, file.N, file.K)
            if launched != configs[vllm_pick_key(configs, M)]:
                wrong.append((M, launched))
        assert wrong == [], f"{file.file_name}: {wrong[:3]}"
        assert logger.records.pop() == (
            "info",
            (
                f"Using configuration from {container.path(targets[file.file_name])} "
                "for W8A8 Block FP8 kernel."
            ),
        )
    assert logger.records == []


def test_without_a_file_vllm_launches_the_tuners_default(vllm_wheel, tmp_path, monkeypatch) -> None:
    files = tuned_files(DEVICE, SHAPES[:1])
    container, compose = _mounted(vllm_wheel, tmp_path, monkeypatch, files)
    folder = Path(compose["volumes"][0]["target"]).parent
    logger, kernel = Logged(), Capture()
    vllm = dense_lookup(vllm_wheel, monkeypatch, container, Platform(GPU), logger, kernel)
    N, K = 4096, 4096  # no file of vLLM's or ours for the L20
    missing = container.path(str(folder / config_file_name(N, K, DEVICE)))
    assert not missing.exists() and missing.parent.is_dir()
    launched = {M: launch_dense(vllm, kernel, M, N, K) for M in (1, 16, 100, 4096, M_MAX)}
    assert launched == dict.fromkeys(launched, default_config().as_dict())
    assert logger.records == [
        (
            "warning",
            (
                "Using default W8A8 Block FP8 kernel config. Performance might be sub-optimal! "
                f"Config file not found at {missing}"
            ),
        )
    ]
    # group_n 64: vLLM's default takes BLOCK_SIZE_N and BLOCK_SIZE_K from the block shape.
    assert launch_dense(vllm, kernel, 1, N, K, (64, 64)) == default_config((64, 64)).as_dict()
