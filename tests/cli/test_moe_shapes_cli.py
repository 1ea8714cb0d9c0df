"""`tuner shapes from-config` and `from-log` for fused-MoE experts: E=..,N=.. from a config.json
or from vLLM's MoE warning, saved next to the dense shapes."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.common import flat, invoke, one_line_error
from tests.tuner.inputs.logfixtures import MOE_DIR, non_default_args
from tests.tuner.inputs.test_hfconfig import QWEN3_MOE
from tuner.inputs.logs import read_log
from tuner.inputs.shapes import load_shapes
from tuner.kernels.moe.family import expert_shape

BLOCK = "E=128,N=768,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json"
PER_TENSOR = "E=8,N=14336,device_name=NVIDIA_H200,dtype=fp8_w8a8.json"


def table_rows(text: str) -> list[list[str]]:
    return [
        [cell.strip() for cell in line.strip("│ ").split("│")]
        for line in text.splitlines()
        if line.startswith("│") and line[1:].strip()[:1].isdigit()
    ]


def test_from_config_gives_qwen3_moes_e128_n384_and_saves_it_and_deepseeks_experts(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**QWEN3_MOE, "_name_or_path": "Qwen/Qwen3-30B-A3B-FP8"}))
    result = invoke("shapes", "from-config", config, "--tp", "2", "--save", "q3moe")
    out = flat(result.stdout)
    assert (
        f"{config}: Qwen3MoeForCausalLM (Qwen/Qwen3-30B-A3B-FP8), TP 2, block_shape [128, 128]"
        in out
    )
    assert table_rows(result.stdout) == [
        ["2560", "2048", "qkv_proj"],
        ["2048", "2048", "o_proj"],
        ["128", "384", "2048", "8"],
    ], result.output
    assert out.endswith("tuner sweep --device <device> --model q3moe --tp 2")
    saved = load_shapes("q3moe", 2)
    assert saved.pairs() == ((2560, 2048), (2048, 2048))
    assert saved.of("moe") == (expert_shape(128, 384, 2048, 8),)
    assert saved.description == (
        "Qwen/Qwen3-30B-A3B-FP8: dense layers and MoE experts derived from config.json"
    )
    # DeepSeek-V3: its experts only.
    deepseek = {"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168}
    deepseek |= {"n_routed_experts": 256, "moe_intermediate_size": 2048, "num_experts_per_tok": 8}
    deepseek |= {"quantization_config": QWEN3_MOE["quantization_config"]}
    config.write_text(json.dumps(deepseek))
    result = invoke("shapes", "from-config", config, "--tp", "8")
    experts_only = "dense layers of DeepseekV3ForCausalLM are not derived; MoE experts only"
    assert experts_only in flat(result.stdout)
    assert table_rows(result.stdout) == [["256", "256", "7168", "8"]], result.output


def moe_log(tmp_path: Path, *names: str) -> Path:
    warning = (
        "(VllmWorker rank=0 pid=410) WARNING 12-01 10:00:41 [fused_moe.py:1001] Using default "
        f"MoE config. Performance might be sub-optimal! Config file not found at {MOE_DIR}/"
    )
    lines = [non_default_args("Qwen/Qwen3-30B-A3B-FP8", None)]
    lines += [warning + name for name in names for _ in range(2)]
    path = tmp_path / "moe.log"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_from_log_reads_block_fp8_moe_warnings_and_names_the_model(tmp_path: Path) -> None:
    log = moe_log(tmp_path, BLOCK, PER_TENSOR)
    scan = read_log(log)
    assert [
        (m.shape.param("E"), m.shape.N, m.device_name, m.shape.block_shape)
        for m in scan.files["moe"]
    ] == [(128, 768, "NVIDIA_H200", (128, 128))]
    assert scan.out_of_scope == {"dense": (), "moe": (PER_TENSOR,)}
    assert (scan.files["dense"], scan.tp) == ((), 1)
    result = invoke("shapes", "from-log", log)
    assert table_rows(result.stdout) == [["128", "768"]], result.output
    out = flat(result.stdout)
    assert f"the engine looks for them in $VLLM_TUNED_CONFIG_FOLDER, then {MOE_DIR}/" in out
    assert (
        f"out of scope: {PER_TENSOR} (a fused-MoE file that is not block FP8 "
        "'dtype=fp8_w8a8,block_shape=[...]'; this tool does not tune it)"
    ) in out
    assert out.endswith(
        "these are shapes of model 'qwen3-30b-a3b-fp8' TP 1; next: "
        "tuner sweep --device NVIDIA_H200 --model qwen3-30b-a3b-fp8 --tp 1"
    )
    saved = invoke("shapes", "from-log", log, "--save", "x")
    one_line_error(
        saved,
        "the log names fused-MoE expert shape(s) by E, N only, not their rows [E, N, K, top_k]: "
        "derive them with `tuner shapes from-config config.json --tp 1 --save x`",
    )
    # only per-tensor files: out of scope
    only = invoke("shapes", "from-log", moe_log(tmp_path, PER_TENSOR), code=1)
    assert f"out of scope: {PER_TENSOR}" in flat(only.stdout)
    assert "no 'Config file not found' warning of the W8A8 block-FP8 kernel" in only.stderr
