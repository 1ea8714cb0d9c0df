"""Per-device advice (tuner.inputs.backends.device_advice) from the table of known GPUs and for
old, unknown and CPU devices; the advice from the store's trials (sm89, sm90 with its MoE line),
as `tuner mounts`, `tuner pull` and the download README print it, is in
tests/cli/test_deploy_advice.py."""

from tuner.inputs.backends import device_advice

FLAG_LINE = (
    "To have them read, start vLLM with --linear-backend triton (or "
    'linear_backend_per_quant={"fp8_block_w8a8": "triton"}); VLLM_BATCH_INVARIANT=1 '
    "ignores the files. Measure first: tuner compare times the tuned Triton kernel "
    "against the default kernels on this GPU."
)


def test_l20_from_the_table_of_known_gpus():
    advice = device_advice("NVIDIA_L20", [])
    assert (advice.arch, advice.needs_flag) == ("sm89", True)
    assert advice.lines() == [
        "NVIDIA_L20 is sm89 (L20: compute capability 8.9, from the table of known GPUs).",
        "vLLM 0.33.0's default kernel for block-FP8 linear layers there is Marlin (weight-only "
        "FP8, W8A16): these files are NOT read with default settings.",
        FLAG_LINE,
    ]


def test_old_unknown_and_cpu_devices():
    assert device_advice("NVIDIA_A100-SXM4-80GB").lines() == [
        "NVIDIA_A100-SXM4-80GB is sm80 (A100: compute capability 8.0, from the table of known "
        "GPUs): no FP8 dot (compute capability below 8.9), so the Triton block-FP8 kernel, and "
        "these files, cannot run there."
    ]
    assert device_advice("NVIDIA_B300").lines()[:2] == [
        "NVIDIA_B300: architecture not known (no trial in the store names a compute capability, "
        "and the GPU is not in the table of known GPUs).",
        "vLLM 0.33.0 runs the Triton kernel, and so reads these files, by default on no CUDA GPU.",
    ]
    interpreter = device_advice("TRITON_INTERPRETER", [""])
    assert not interpreter.needs_flag
    assert interpreter.lines() == [
        "TRITON_INTERPRETER is Triton's CPU interpreter: its files carry CPU timings, for trying "
        "the tuner out; no vLLM server reads them."
    ]
