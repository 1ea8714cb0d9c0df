"""Shapes data: the files in shapes/ and their loader."""

import pytest

from tuner.inputs.shapes import UnknownModelError, known_models, load_shapes, tp_sizes


def test_known_models():
    assert {"qwen3.8-27b", "deepseek-v3", "tiny"} <= set(known_models())


def test_qwen_tp2_is_the_five_field_report_shapes():
    entry = load_shapes("qwen3.8-27b", 2)
    assert entry.shapes == ((17408, 5120), (5120, 3072), (5120, 8704), (7168, 5120), (8192, 5120))
    assert entry.block_shape == (128, 128)
    assert "field report" in entry.source
    assert load_shapes("qwen3.8-27b").tp == 2  # the only TP listed


def test_deepseek_v3_follows_vllms_tuning_script():
    assert tp_sizes("deepseek-v3") == [1, 2, 4, 8]
    tp8 = load_shapes("deepseek-v3", 8).shapes
    # get_weight_shapes(8): unsplit, then N // 8, then K // 8 (duplicates once).
    assert tp8 == (
        (576, 7168),
        (24576, 7168),
        (32768, 512),
        (7168, 16384),
        (7168, 18432),
        (4608, 7168),
        (3072, 7168),
        (4096, 512),
        (3072, 1536),
        (1536, 7168),
        (512, 7168),
        (7168, 2304),
        (7168, 2048),
        (7168, 256),
    )
    assert "benchmark_w8a8_block_fp8.py" in load_shapes("deepseek-v3", 8).source


def test_unknown_model_lists_known_ones():
    with pytest.raises(UnknownModelError, match="unknown model 'llama'; known: deepseek-v3"):
        load_shapes("llama")


def test_unknown_tp_lists_listed_ones():
    with pytest.raises(UnknownModelError, match="no shapes for TP 4; listed: 2"):
        load_shapes("qwen3.8-27b", 4)
    with pytest.raises(UnknownModelError, match="choose one with --tp"):
        load_shapes("deepseek-v3")
