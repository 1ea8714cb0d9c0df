"""Server logs: the missing block-FP8 config files vLLM and SGLang warn about, nothing else; the
shapes they ask for and the next step (the packaged model that covers them, or saving them)."""

from __future__ import annotations

import gzip
from dataclasses import replace
from pathlib import Path

import pytest

from tests.tuner.inputs.logfixtures import (
    DSV3_TP8,
    QWEN_TP2,
    SGLANG_DIR,
    VLLM_DIR,
    sglang_log,
    vllm_log,
    vllm_name,
)
from tuner.inputs.logs import log_shapes, next_step, read_log, save_problem, scan_lines


def test_vllm_log_with_ranks_moe_noise_and_crlf(tmp_path: Path) -> None:
    path = tmp_path / "vllm.log"
    path.write_bytes(vllm_log().encode())
    scan = read_log(path)
    assert scan.shapes() == [(N, K, (128, 128)) for N, K in QWEN_TP2]
    assert scan.warnings == 2 * 2 * 5  # twice, two ranks, five shapes
    assert scan.device_names == ["NVIDIA_L20"]
    assert (scan.tp, scan.model) == (2, "Qwen/Qwen3.8-27B-FP8")
    first = scan.files["dense"][0]
    assert first.engine == "vllm"
    assert first.path == f"{VLLM_DIR}/{vllm_name(7168, 5120)}"
    assert first.folder == VLLM_DIR
    assert all(m.shape.N != 768 for m in scan.files["dense"])  # the MoE file is kept apart
    assert [(s.param("E"), s.N, s.block_shape) for s in scan.shapes_of("moe")] == [
        (128, 768, (128, 128))
    ]
    assert scan.files["moe"][0].path.startswith("/usr/local/lib/python3.12/dist-packages/vllm/")


def test_sglang_log_spaced_block_shape(tmp_path: Path) -> None:
    path = tmp_path / "sglang.log"
    path.write_text(sglang_log())
    scan = read_log(path)
    assert scan.shapes() == [
        (24576, 1536, (128, 128)),
        (576, 7168, (128, 128)),
        (7168, 2048, (128, 128)),
    ]
    assert scan.warnings == 24
    assert scan.device_names == ["NVIDIA_H20-3e"]
    assert (scan.tp, scan.model) == (8, "deepseek-ai/DeepSeek-V3")
    assert {m.engine for m in scan.files["dense"]} == {"sglang"}
    assert {m.folder for m in scan.files["dense"]} == {SGLANG_DIR}


def test_gzip_log(tmp_path: Path) -> None:
    path = tmp_path / "vllm.log.gz"
    path.write_bytes(gzip.compress(vllm_log(line_end="\n").encode()))
    assert len(read_log(path).shapes()) == 5


def test_tp_and_model_from_vllm_non_default_args_alone() -> None:
    text = vllm_log(
        DSV3_TP8,
        ranks=range(8),
        model="deepseek-ai/DeepSeek-V3",
        tp=8,
        config_line=False,
        device="NVIDIA_H200",
    )
    assert "tensor_parallel_size=" not in text
    scan = scan_lines(text.splitlines())
    assert (scan.tp, scan.model) == (8, "deepseek-ai/DeepSeek-V3")
    assert scan.shapes() == [(N, K, (128, 128)) for N, K in DSV3_TP8]
    assert scan.warnings == 2 * 8 * 4


def test_non_default_args_without_tp_mean_vllms_default_1() -> None:
    text = vllm_log(model="/models/qwen3-8b", tp=None, config_line=False)
    assert "tensor_parallel_size" not in text
    assert (scan_lines(text.splitlines()).tp, scan_lines(text.splitlines()).model) == (
        1,
        "/models/qwen3-8b",
    )
    # With the engine's config line too (vLLM prints both), they agree.
    assert scan_lines(vllm_log(tp=None).splitlines()).tp == 1


def test_conflicting_tp_is_not_guessed() -> None:
    lines = ["tensor_parallel_size=2", "tensor_parallel_size=4"]
    assert scan_lines(lines).tp is None


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
    assert scan_lines(lines).shapes() == [(256, 512, (128, 128))]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty file, not a server log"),
        (b"  \r\n\n", "empty file, not a server log"),
        (b"\x7fELF\x02\x01\x01\x00\x00\x00binary", "binary file, not a text log"),
        (b"\x1f\x8b\x08\x00\x00\x00\x00\x00", "truncated gzip file"),
    ],
)
def test_bad_log_files_are_one_line(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.log"
    path.write_bytes(content)
    with pytest.raises(ValueError) as raised:
        read_log(path)
    assert str(raised.value) == f"{path}: {message}"


def test_missing_and_folder(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"nope\.log: cannot read: No such file or directory"):
        read_log(tmp_path / "nope.log")
    with pytest.raises(ValueError, match="is a folder, not a log file"):
        read_log(tmp_path)


MOE_LINE = (
    "no known model lists these MoE experts; derive them (E, N, K, top_k) with: tuner "
    "shapes from-config config.json --tp {tp} --save NAME"
)
LOG = Path("logs/serve 1.log")


@pytest.fixture(autouse=True)
def no_user_shapes(tmp_path, monkeypatch):
    monkeypatch.setenv("TUNER_SHAPES_DIR", str(tmp_path / "shapes"))


def _scan(shapes):
    return scan_lines(vllm_log(shapes=shapes, model="acme/Odd-7B-FP8", tp=2).splitlines())


def test_the_packaged_model_that_covers_the_shapes_is_the_next_step():
    scan = _scan(QWEN_TP2)
    found = log_shapes(scan, None)
    assert (found.tp, found.pairs, found.experts, found.block_shapes, found.engines) == (
        2,
        QWEN_TP2,
        [(128, 768, (128, 128))],
        [(128, 128)],
        ["vllm"],
    )
    step = next_step(scan, found, LOG)
    assert step.lines == (
        MOE_LINE.format(tp=2),
        "these are shapes of model 'qwen3.8-27b' TP 2; next:",
    )
    assert (step.model, step.tp, step.sglang) == ("qwen3.8-27b", 2, False)


def test_unknown_shapes_are_saved_first_with_tp_only_when_it_is_not_the_logs():
    scan = _scan([(384, 256)])
    step = next_step(scan, log_shapes(scan, None), LOG)
    assert step.lines[-1] == (
        "save them first (tuner shapes from-log 'logs/serve 1.log' --save odd-7b-fp8), then:"
    )
    assert (step.model, step.tp) == ("odd-7b-fp8", 2)
    scan = _scan(QWEN_TP2)  # the Qwen shapes of TP 2 are no packaged model's at TP 4
    step = next_step(scan, log_shapes(scan, 4), LOG)
    assert step.lines == (
        MOE_LINE.format(tp=4),
        "save them first (tuner shapes from-log "
        "'logs/serve 1.log' --save odd-7b-fp8 --tp 4), then:",
    )


def test_save_needs_a_tp_one_block_shape_and_dense_shapes():
    found = log_shapes(_scan(QWEN_TP2), None)
    assert save_problem(found, "x") is None
    assert save_problem(replace(found, tp=None), "x") == (
        "the log does not state the tensor-parallel size: pass --tp with --save"
    )
    assert save_problem(replace(found, block_shapes=[(64, 64), (128, 128)]), "x") == (
        "the log has shapes of several block_shapes; a shapes entry has one"
    )
    assert save_problem(replace(found, pairs=[]), "x") == (
        "the log names the MoE experts' E and N but not their K (hidden size) or top_k: save "
        "them with `tuner shapes from-config config.json --tp 2 --save x`"
    )
