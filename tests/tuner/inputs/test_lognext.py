"""tuner.inputs.lognext: the shapes a scanned log asks for, why `--save` cannot keep them, and
the next step: the packaged model that covers them, or the command that saves them first."""

from dataclasses import replace
from pathlib import Path

import pytest

from tests.tuner.inputs.logfixtures import QWEN_TP2, vllm_log
from tuner.inputs.logs import log_shapes, next_step, save_problem
from tuner.inputs.logs import scan_lines

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
