"""Per-device advice (tuner.inputs.backends.device_advice): the architecture from the store's
trials, else the table of known GPUs, and whether vLLM 0.33.0 reads the files there."""

from tuner.files.archive import readme_text
from tuner.files.merge import DeviceFiles
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


def test_the_store_s_trials_win_over_the_table_and_sm90_reads_moe_files():
    advice = device_advice("NVIDIA_H200", ["", "9.0"])
    assert advice.lines() == [
        "NVIDIA_H200 is sm90 (compute capability 9.0, from its trials in the store).",
        "vLLM 0.33.0's default kernel for block-FP8 linear layers there is DeepGEMM (FlashInfer "
        "DeepGEMM where FlashInfer's kernels are installed or can be built), or CUTLASS where "
        "DeepGEMM cannot run: these files are NOT read with default settings.",
        FLAG_LINE,
        "Fused-MoE files (E=...) are read by default here: vLLM moves its Triton MoE kernel "
        "first on sm90 with 128x128 FP8 weights and ep_size 1.",
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


def test_the_download_readme_opens_with_the_device_s_advice():
    text = readme_text("NVIDIA_L20", DeviceFiles(files=[], skipped=[]), compute_capability="8.9")
    lines = text.splitlines()
    start = lines.index("Does vLLM read them")
    assert lines[start + 1 : start + 4] == [
        "NVIDIA_L20 is sm89 (compute capability 8.9, from its trials in the store).",
        "vLLM 0.33.0's default kernel for block-FP8 linear layers there is Marlin (weight-only "
        "FP8,",
        "W8A16): these files are NOT read with default settings.",
    ]
    assert "start vLLM with --linear-backend triton (or" in text
    assert "`" not in text
