"""`tuner shapes from-config` and `from-log`: dense shapes and fused-MoE experts (E=..,N=..)
from a config.json or from vLLM's and SGLang's warnings, saved as a model `tuner sweep` takes."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.common import flat, invoke, ok, one_line_error
from tests.tuner.inputs.logfixtures import MOE_DIR, QWEN_TP2, non_default_args, sglang_log, vllm_log
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
    assert "saved as model 'q3moe', TP 2: " in out
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


MOE_LINE = (
    "the log names fused-MoE expert shape(s) by E, N only: derive their rows [E, N, K, top_k] "
    "with `tuner shapes from-config config.json --tp {tp}`"
)


def test_from_log_prints_and_saves_the_dense_shapes_the_experts_go_to_from_config(tmp_path):
    log = tmp_path / "serve.log"
    log.write_text(vllm_log())
    out = flat(ok("shapes", "from-log", log).stdout)
    assert f"{log}: 20 warning(s); device_name NVIDIA_L20; model Qwen/Qwen3.8-27B-FP8; TP 2" in out
    assert "5 shape(s) without a config file, block_shape [128, 128]" in out
    assert "1 fused-MoE expert shape(s) without a config file" in out
    # --tp overrides the log's; the experts are not saved (a log names no K or top_k).
    result = ok("shapes", "from-log", log, "--save", "served", "--tp", "4")
    assert table_rows(result.stdout) == [[str(n), str(k)] for n, k in QWEN_TP2] + [["128", "768"]]
    out = flat(result.stdout)
    assert f"not saved: {MOE_LINE.format(tp=4)}" in out
    assert "saved as model 'served', TP 4: " in out
    saved = load_shapes("served", 4)
    assert (saved.pairs(), saved.of("moe")) == (tuple(QWEN_TP2), ())
    assert saved.description == "Qwen/Qwen3.8-27B-FP8: shapes read from a server log"
    # SGLang's log: TP 8 and its spaced block_shape; `shapes show` and `list` find the model.
    log.write_text(sglang_log())
    ok("shapes", "from-log", log, "--save", "dsv3-h20")
    shown = flat(ok("shapes", "show", "dsv3-h20").stdout)
    assert "dsv3-h20 TP 8, block_shape [128, 128]" in shown
    assert "source: 'Config file not found' warnings in serve.log" in shown
    assert "dsv3-h20" in ok("shapes", "list").stdout
    # The warnings alone state no TP.
    log.write_text("\n".join(line for line in vllm_log().splitlines() if "not found" in line))
    one_line_error(
        invoke("shapes", "from-log", log, "--save", "x"),
        "the log does not state the tensor-parallel size: pass --tp with --save",
    )


def test_from_log_reads_block_fp8_moe_warnings_only(tmp_path: Path) -> None:
    log = moe_log(tmp_path, BLOCK, PER_TENSOR)
    scan = read_log(log)
    assert [
        (m.shape.param("E"), m.shape.N, m.device_name, m.shape.block_shape)
        for m in scan.files["moe"]
    ] == [(128, 768, "NVIDIA_H200", (128, 128))]
    assert (scan.files["dense"], scan.tp) == ((), 1)
    result = invoke("shapes", "from-log", log)
    assert table_rows(result.stdout) == [["128", "768"]], result.output
    one_line_error(invoke("shapes", "from-log", log, "--save", "x"), MOE_LINE.format(tp=1))
    # only per-tensor files: not tuned
    only = invoke("shapes", "from-log", moe_log(tmp_path, PER_TENSOR), code=1)
    assert "no 'Config file not found' warning of the W8A8 block-FP8 kernel" in only.stderr
