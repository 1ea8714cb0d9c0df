"""Server logs: the missing block-FP8 config files vLLM and SGLang warn about, nothing else (what
`tuner shapes from-log` prints and saves of them: tests/cli/test_moe_shapes_cli.py)."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from tests.tuner.inputs.logfixtures import (
    QWEN_TP2,
    SGLANG_DIR,
    VLLM_DIR,
    sglang_log,
    vllm_log,
    vllm_name,
)
from tuner.inputs.logs import read_log, scan_lines


def dense(scan) -> list[tuple[int, int, tuple[int, int] | None]]:
    return [(s.N, s.K, s.block_shape) for s in scan.shapes_of("dense")]


def test_vllm_log_with_ranks_moe_noise_crlf_and_gzip(tmp_path: Path) -> None:
    path = tmp_path / "vllm.log.gz"
    path.write_bytes(gzip.compress(vllm_log().encode()))
    scan = read_log(path)
    assert dense(scan) == [(N, K, (128, 128)) for N, K in QWEN_TP2]
    assert scan.warnings == 2 * 2 * 5  # twice, two ranks, five shapes
    assert (scan.device_names, scan.tp, scan.model) == (["NVIDIA_L20"], 2, "Qwen/Qwen3.8-27B-FP8")
    assert scan.files["dense"][0].path == f"{VLLM_DIR}/{vllm_name(7168, 5120)}"
    assert [(s.param("E"), s.N, s.block_shape) for s in scan.shapes_of("moe")] == [
        (128, 768, (128, 128))
    ]


def test_sglang_log_spaced_block_shape(tmp_path: Path) -> None:
    path = tmp_path / "sglang.log"
    path.write_text(sglang_log())
    scan = read_log(path)
    block = (128, 128)
    assert dense(scan) == [(24576, 1536, block), (576, 7168, block), (7168, 2048, block)]
    assert (scan.warnings, scan.device_names) == (24, ["NVIDIA_H20-3e"])
    assert (scan.tp, scan.model) == (8, "deepseek-ai/DeepSeek-V3")
    assert scan.files["dense"][0].path.startswith(f"{SGLANG_DIR}/N=24576,K=1536,")


def test_tp_and_model_from_vllm_non_default_args_alone() -> None:
    """Without a TP there: vLLM's default 1 (a TP stated there: tests/cli/test_cli_serving.py)."""
    scan = scan_lines(vllm_log(model="/models/qwen3-8b", tp=None, config_line=False).splitlines())
    assert (scan.tp, scan.model) == (1, "/models/qwen3-8b")
    assert scan_lines(vllm_log(tp=None).splitlines()).tp == 1  # with the engine's line too
    assert scan_lines(["tensor_parallel_size=2", "tensor_parallel_size=4"]).tp is None


def test_int8_and_unparseable_names_are_skipped() -> None:
    warning = (
        "WARNING Using default W8A8 Block FP8 kernel config. Performance might be "
        "sub-optimal! Config file not found at /x/"
    )
    lines = [
        warning + "N=1,K=2,device_name=A,dtype=int8_w8a8,block_shape=[128,128].json",
        warning + "N=0,K=2,device_name=A,dtype=fp8_w8a8,block_shape=[128,128].json",
        warning + "somewhere else entirely",
        warning + vllm_name(256, 512, "NVIDIA_H200"),
    ]
    assert dense(scan_lines(lines)) == [(256, 512, (128, 128))]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\x1f\x8b\x08\x00\x00\x00\x00\x00", "truncated gzip file"),
        (None, "cannot read: No such file or directory"),
        ("folder", "cannot read: Is a directory"),
    ],
)
def test_bad_log_files_are_one_line(tmp_path: Path, content, message: str) -> None:
    path = tmp_path if content == "folder" else tmp_path / "bad.log"
    if isinstance(content, bytes):
        path.write_bytes(content)
    with pytest.raises(ValueError) as raised:
        read_log(path)
    assert str(raised.value) == f"{path}: {message}"
