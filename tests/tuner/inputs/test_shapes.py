"""Shapes files: the packaged ones (vLLM's tuning script, the field report), the user's folder
(saved entries load back, packaged ones win), bad files as one line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tuner.inputs.shapes import (
    ShapesFileError,
    UnknownModelError,
    known_models,
    load_shapes,
    save_shapes,
    tp_sizes,
    user_shapes_dir,
)
from tuner.kernels.moe.family import MOE, expert_shape
from tuner.kernels.registry import DEFAULT_FAMILY
from tuner.kernels.shape import Shape

SHAPES = [(7168, 5120), (5120, 3072)]


def save(model: str, tp: int, pairs=SHAPES, moe=(), **fields) -> Path:
    """save_shapes of dense (N, K) pairs and MoE rows (E, N, K, top_k), block 128x128."""
    dense = [Shape(n, k, (128, 128)) for n, k in pairs]
    groups = {DEFAULT_FAMILY: dense, MOE.name: [expert_shape(*row) for row in moe]}
    return save_shapes(
        model, tp=tp, groups=groups, **{"block_shape": (128, 128), "source": "x"} | fields
    )


def folder() -> Path:
    return Path(os.environ["TUNER_SHAPES_DIR"])


def test_user_dir_default(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("TUNER_SHAPES_DIR")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert user_shapes_dir() == tmp_path / "blockfp8-tuner" / "shapes"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert user_shapes_dir() == tmp_path / ".config" / "blockfp8-tuner" / "shapes"


def test_save_and_load_back() -> None:
    path = save("my-model", 2, SHAPES + [SHAPES[0]], source='log "x.log"', description="Mine")
    assert path == folder() / "my-model.toml"
    entry = load_shapes("my-model", 2)
    fields = (entry.model, entry.tp, entry.pairs(), entry.source, entry.description)
    assert fields == ("my-model", 2, tuple(SHAPES), 'log "x.log"', "Mine")
    assert "my-model" in known_models() and "tiny" in known_models()
    # A second TP size is added; the first is kept, and so is the description.
    save("my-model", 4, [(3584, 5120)])
    assert tp_sizes("my-model") == [2, 4]
    assert load_shapes("my-model", 4).description == "Mine"
    assert load_shapes("my-model", 2).pairs() == tuple(SHAPES)


def test_save_keeps_moe_lines() -> None:
    path = save("qmoe", 2, [(1280, 2048)], [(128, 384, 2048, 8)] * 2, source="c", description="d")
    save("qmoe", 1, [], [(128, 768, 2048, 8)], source="c1")
    assert path.read_text() == (
        'model = "qmoe"\ndescription = "d"\nblock_shape = [128, 128]\n\n'
        '[tp.1]\nsource = "c1"\nmoe = [\n    [128, 768, 2048, 8],\n]\n\n'
        '[tp.2]\nsource = "c"\nshapes = [\n    [1280, 2048],\n]\n'
        "moe = [\n    [128, 384, 2048, 8],\n]\n"
    )
    assert load_shapes("qmoe", 2).of(MOE.name) == (expert_shape(128, 384, 2048, 8),)
    assert load_shapes("qmoe", 1).pairs() == ()
    with pytest.raises(ValueError, match="shapes must be a non-empty list"):
        save("qmoe", 4, [])


def test_save_refuses() -> None:
    with pytest.raises(ValueError, match="'tiny' is a packaged model"):
        save("tiny", 1)
    with pytest.raises(ValueError, match="'My Model' is not a model key"):
        save("My Model", 1)
    save("m", 1)
    with pytest.raises(ValueError, match=r"block_shape \[128, 128\], the new shapes \[64, 64\]"):
        save("m", 2, block_shape=(64, 64))


def test_packaged_model_wins_over_a_user_file() -> None:
    (folder() / "tiny.toml").write_text(
        'model = "tiny"\nblock_shape = [1, 1]\n[tp.1]\nsource = "x"\nshapes = [[1, 1]]\n'
    )
    assert load_shapes("tiny", 1).pairs() == ((256, 384), (576, 256))
    assert known_models().count("tiny") == 1


GOOD = 'model = "bad-file"\nblock_shape = [128, 128]\n[tp.1]\nsource = "x"\nshapes = [[1, 2]]\n'


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ('"bad-file"', '"bad"', "model = 'bad' differs from the file name"),
        ("[tp.1]", "extra = 1\n[tp.1]", "extra: Extra inputs are not permitted"),
        ("[128, 128]", "[128]", "block_shape.1: Field required"),
        ('[tp.1]\nsource = "x"\nshapes = [[1, 2]]\n', "", "tp: Field required"),
        ("[tp.1]", "[tp.x]", "tp.x.[key]: Input should be a valid integer"),
        ('source = "x"\n', "", "tp.1.source: Field required"),
        ("[[1, 2]]", '[[1, "2"]]', "TP 1: K = '2' is not an integer"),
        ("[[1, 2]]", f"[[1, {10**30}]]", "TP 1: K is larger than 999999999"),
        ("[[1, 2]]\n", "[[1, 2]]\noops = 3\n", "TP 1: unknown key(s) 'oops'; allowed: source"),
    ],
)
def test_malformed_user_file_is_one_line(old: str, new: str, problem: str) -> None:
    """Invalid TOML, through the CLI: tests/cli/test_cli_serving.py."""
    path = folder() / "bad-file.toml"
    path.write_text(GOOD.replace(old, new))
    with pytest.raises(ShapesFileError) as raised:
        load_shapes("bad-file", 1)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"{path}")
    assert problem in message


def test_unknown_models_and_tp_sizes_list_the_known_ones() -> None:
    (folder() / "bin.toml").write_bytes(b"\xff\xfe\x00\x00")
    with pytest.raises(ShapesFileError, match=r"bin\.toml: not UTF-8 text"):
        load_shapes("bin")
    save("zeta", 1)
    with pytest.raises(UnknownModelError) as unknown:
        load_shapes("qwen3.8-27B")
    assert str(unknown.value) == (
        "unknown model 'qwen3.8-27B'; known: bin, deepseek-v3, "
        "qwen3-30b-a3b-fp8, qwen3.8-27b, tiny, tiny-moe, zeta"
    )
    with pytest.raises(UnknownModelError):
        load_shapes("../etc/passwd")
    with pytest.raises(UnknownModelError, match="choose one with --tp"):
        load_shapes("deepseek-v3")
    assert load_shapes("qwen3.8-27b").tp == 2  # the only TP listed


def test_the_model_type_vllms_selection_reads_is_kept_and_checked() -> None:
    """A shapes file may name the model's Hugging Face model type (vLLM's DeepGEMM check reads
    it): the packaged DeepSeek-V3 and Qwen3-30B-A3B files do, saved files keep it."""
    assert load_shapes("deepseek-v3", 8).model_type == "deepseek_v3"
    assert load_shapes("qwen3-30b-a3b-fp8", 1).model_type == "qwen3_moe"
    assert load_shapes("tiny").model_type is None
    path = save("typed", 1, model_type="qwen3_5_text")
    assert 'model_type = "qwen3_5_text"\n' in path.read_text()
    save("typed", 2)
    assert load_shapes("typed", 2).model_type == "qwen3_5_text"  # kept from the file
    (folder() / "badtype.toml").write_text(
        'model = "badtype"\nblock_shape = [128, 128]\nmodel_type = "Qwen 3"\n\n'
        '[tp.1]\nsource = "s"\nshapes = [[128, 128]]\n'
    )
    with pytest.raises(ShapesFileError) as bad:
        load_shapes("badtype")
    assert str(bad.value).startswith(f"{folder() / 'badtype.toml'}: model_type: String should")


def test_deepseek_v3_follows_vllms_tuning_script():
    assert tp_sizes("deepseek-v3") == [1, 2, 4, 8]
    tp8 = load_shapes("deepseek-v3", 8).shapes
    # get_weight_shapes(8): unsplit, then N // 8, then K // 8 (duplicates once).
    assert " ".join(f"{N}x{K}" for N, K in tp8) == (
        "576x7168 24576x7168 32768x512 7168x16384 7168x18432 4608x7168 3072x7168 4096x512 "
        "3072x1536 1536x7168 512x7168 7168x2304 7168x2048 7168x256"
    )
    assert "benchmark_w8a8_block_fp8.py" in load_shapes("deepseek-v3", 8).source
