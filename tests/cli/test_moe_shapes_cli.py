"""`tuner shapes from-config` and `from-log` for fused-MoE experts: E=..,N=.. from a config.json
or from vLLM's MoE warning, saved next to the dense shapes."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from tests.tuner.inputs.test_hfconfig import QWEN3_MOE
from tuner.cli.app import app
from tuner.inputs.shapes import load_shapes

runner = CliRunner()


def flat(text: str) -> str:
    return " ".join(text.split())


def table_rows(text: str) -> list[list[str]]:
    return [[cell.strip() for cell in line.strip("│ ").split("│")]
            for line in text.splitlines() if line.startswith("│") and line[1:].strip()[:1].isdigit()]


def test_from_config_qwen3_moe_tp2_gives_e128_n384_and_saves_it(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**QWEN3_MOE, "_name_or_path": "Qwen/Qwen3-30B-A3B-FP8"}))
    result = runner.invoke(app, ["shapes", "from-config", str(config), "--tp", "2",
                                 "--save", "q3moe"])
    assert result.exit_code == 0, result.output
    assert (f"{config}: Qwen3MoeForCausalLM (Qwen/Qwen3-30B-A3B-FP8), TP 2, block_shape "
            "[128, 128]") in flat(result.stdout)
    assert table_rows(result.stdout) == [["2560", "2048", "qkv_proj"], ["2048", "2048", "o_proj"],
                                         ["128", "384", "2048", "8"]]
    assert flat(result.stdout).endswith("tuner sweep --device <device> --model q3moe --tp 2")
    saved = load_shapes("q3moe", 2)
    assert (saved.shapes, saved.moe) == (((2560, 2048), (2048, 2048)), ((128, 384, 2048, 8),))
    assert saved.description == ("Qwen/Qwen3-30B-A3B-FP8: dense layers and MoE experts derived "
                                 "from config.json")


def test_from_config_experts_only_for_deepseek(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168, "n_routed_experts": 256,
        "moe_intermediate_size": 2048, "num_experts_per_tok": 8,
        "quantization_config": QWEN3_MOE["quantization_config"]}))
    result = runner.invoke(app, ["shapes", "from-config", str(config), "--tp", "8"])
    assert result.exit_code == 0, result.output
    assert ("dense layers of DeepseekV3ForCausalLM are not derived; MoE experts only"
            in flat(result.stdout))
    assert table_rows(result.stdout) == [["256", "256", "7168", "8"]]
