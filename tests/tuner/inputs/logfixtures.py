"""Server logs written in vLLM's and SGLang's formats, with noise, for the log reader's tests."""

from __future__ import annotations

VLLM_DIR = (
    "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/layers/quantization/utils/configs"
)
MOE_DIR = "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/layers/fused_moe/configs"
SGLANG_DIR = "/sgl-workspace/sglang/python/sglang/srt/layers/quantization/configs"
# The field report's five shapes vLLM logged as missing for Qwen3.8-27B-FP8 at TP 2 on 2x L20.
QWEN_TP2 = [(7168, 5120), (5120, 3072), (17408, 5120), (5120, 8704), (8192, 5120)]
BLOCK_WARNING = (
    "Using default W8A8 Block FP8 kernel config. Performance might be sub-optimal! "
    "Config file not found at {path}"
)


def vllm_name(N: int, K: int, device: str = "NVIDIA_L20") -> str:
    return f"N={N},K={K},device_name={device},dtype=fp8_w8a8,block_shape=[128,128].json"


def non_default_args(model: str, tp: int | None) -> str:
    """vLLM's start-up line (log_non_default_args, vllm/entrypoints/utils.py): a dict repr of
    the arguments that differ from the defaults; TP 1 is the default and is left out."""
    args = {"model_tag": model, "model": model, "trust_remote_code": True}
    if tp is not None:
        args["tensor_parallel_size"] = tp
    return f"INFO 12-01 10:00:01 [utils.py:326] non-default args: {args}"


def vllm_log(
    shapes=QWEN_TP2,
    ranks=(0, 1),
    line_end: str = "\r\n",
    *,
    model: str = "Qwen/Qwen3.8-27B-FP8",
    tp: int | None = 2,
    config_line: bool = True,
    device: str = "NVIDIA_L20",
) -> str:
    """A vLLM 0.33-style log: start-up noise, per-rank warnings twice, MoE warnings, colours.

    `config_line=False` leaves out the engine's "with config:" line, so that only the
    non-default args state the TP size (`tp=None`: not stated there, i.e. vLLM's default 1).
    """
    lines = [
        "INFO 12-01 10:00:00 [__init__.py:239] Automatically detected platform cuda.",
        "INFO 12-01 10:00:01 [api_server.py:1043] vLLM API server version 0.33.0",
        non_default_args(model, tp),
    ]
    if config_line:
        lines.append(
            "INFO 12-01 10:00:02 [core.py:58] Initializing a V1 LLM engine (v0.33.0) with config: "
            f"model='{model}', speculative_config=None, tokenizer='{model}', "
            f"dtype=torch.bfloat16, max_seq_len=32768, tensor_parallel_size={tp or 1}, "
            "pipeline_parallel_size=1, quantization=fp8, served_model_name='qwen'"
        )
    lines += [
        "(VllmWorker rank=0 pid=4101) INFO 12-01 10:00:40 [gpu_model_runner.py:1595] Model "
        "loading took 14.1 GiB and 30.2 seconds",
        "(VllmWorker rank=1 pid=4102) WARNING 12-01 10:00:41 [fused_moe.py:1001] Using default "
        "MoE config. Performance might be sub-optimal! Config file not found at "
        f"{MOE_DIR}/E=128,N=768,device_name=NVIDIA_L20,dtype=fp8_w8a8,block_shape=[128,128].json",
        "Traceback (most recent call last): nothing, just noise with N=1,K=2 in it",
        "\x1b[1;36m(VllmWorker rank=0 pid=4101)\x1b[0;0m DEBUG 12-01 10:00:41 N=9,K=9 is noise",
    ]
    for _ in range(2):  # warnings repeat (e.g. profile run, then CUDA graph capture)
        for rank in ranks:
            for N, K in shapes:
                path = f"{VLLM_DIR}/{vllm_name(N, K, device)}"
                lines.append(
                    f"(VllmWorker rank={rank} pid={4101 + rank}) WARNING 12-01 "
                    f"10:01:0{rank} [fp8_utils.py:851] " + BLOCK_WARNING.format(path=path)
                )
    lines.append(
        "\x1b[32mINFO\x1b[0m 12-01 10:02:00 [api_server.py:1800] Starting vLLM API "
        "server on http://0.0.0.0:8000"
    )
    return line_end.join(lines) + line_end


def sglang_log() -> str:
    """An SGLang-style log (server_args line, [date TPn] prefixes, spaced block_shape)."""
    lines = [
        "[2026-06-01 10:00:00] server_args=ServerArgs(model_path='deepseek-ai/DeepSeek-V3', "
        "tokenizer_path='deepseek-ai/DeepSeek-V3', tp_size=8, dp_size=1, attn_tp_size=8)",
        "[2026-06-01 10:00:05 TP0] Load weight end. type=DeepseekV3ForCausalLM",
    ]
    for tp_rank in range(8):
        for N, K in ((24576, 1536), (576, 7168), (7168, 2048)):
            path = (
                f"{SGLANG_DIR}/N={N},K={K},device_name=NVIDIA_H20-3e,dtype=fp8_w8a8,"
                "block_shape=[128, 128].json"
            )
            lines.append(f"[2026-06-01 10:00:30 TP{tp_rank}] " + BLOCK_WARNING.format(path=path))
        lines.append(
            f"[2026-06-01 10:00:31 TP{tp_rank}] Using default MoE config. Performance might be "
            "sub-optimal! Config file not found at /sgl-workspace/sglang/python/sglang/srt/"
            "layers/moe/fused_moe_triton/configs/triton_3_2_0/E=257,N=256,"
            "device_name=NVIDIA_H20-3e,dtype=fp8_w8a8,block_shape=[128, 128].json"
        )
    return "\n".join(lines) + "\n"
