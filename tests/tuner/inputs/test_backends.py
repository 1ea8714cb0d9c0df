"""Which kernel vLLM runs for block-FP8 layers: the per-architecture text, what a server log
says about it, and the per-device advice from the table of known GPUs (from the store's trials:
tests/cli/test_deploy_advice.py)."""

from __future__ import annotations

import pytest

from tuner.inputs.backends import backend_lines, device_advice, kernel_verdict, selected_kernel
from tuner.inputs.logs import scan_lines
from tuner.kernels.config import KernelConfig
from tuner.kernels.gpus import KNOWN_GPUS, MAX_SHARED_BYTES
from tuner.kernels.vllm_table import (
    MARLIN,
    arch_of,
    deepgemm_refusal,
    table_dense_kernel,
)
from tuner.measure.compile import CompileInfo, device_arch, launch_problem

PREFIX = "(VllmWorker rank=0 pid=4101) INFO 12-01 10:00:30 [__init__.py:640] "


def test_per_architecture_lines() -> None:
    lines = backend_lines("8.9")
    assert lines[0] == "vLLM 0.33.0's default kernel for block-FP8 linear layers:"
    assert lines[1].startswith("- sm89 (this device) (L20, L40S, RTX 4090): by default Marlin ")
    assert lines[2].startswith("- sm90 (H100, H200, H20): by default DeepGEMM (FlashInfer ")
    assert "--linear-backend triton" in lines[4] and "VLLM_BATCH_INVARIANT=1" in lines[4]
    assert "(this device)" not in " ".join(backend_lines(None))
    capabilities = ("8.9", "9.0", "10.0", "12.0", "8.0", "", None)
    sm100 = "sm100/sm120"
    assert [arch_of(cc) for cc in capabilities] == ["sm89", "sm90", sm100, sm100, None, None, None]


DEEPGEMM, CUTLASS = "DeepGemmFp8BlockScaledMMKernel", "CutlassFp8BlockScaledMMKernel"


@pytest.mark.parametrize(
    ("capability", "N", "K", "dtype", "model_type", "kernel"),
    [
        (89, 7168, 18432, "bfloat16", None, MARLIN),
        (0, 7168, 18432, "bfloat16", None, None),  # the interpreter's capability: none known
        (90, 7168, 18432, "bfloat16", None, DEEPGEMM),
        (90, 7168, 18432, "float16", None, CUTLASS),
        (90, 200, 256, "bfloat16", None, CUTLASS),
        # Blackwell: DeepGEMM unless vLLM turns it off for the model type on that family.
        (100, 7168, 18432, "bfloat16", "qwen3_5_text", CUTLASS),
        (100, 7168, 18432, "bfloat16", "kolibri1", DEEPGEMM),
        (120, 7168, 18432, "bfloat16", "kolibri1", None),
        (80, 7168, 18432, "bfloat16", None, None),
    ],
)
def test_the_table_names_deepgemm_where_vllm_runs_it(capability, N, K, dtype, model_type, kernel):
    assert table_dense_kernel(capability, N, K, dtype, model_type) == kernel


def test_deepgemm_refusals() -> None:
    assert deepgemm_refusal(90, 200, 256, "bfloat16", None) == (
        "DeepGEMM needs N % 64 == 0 and K % 128 == 0 (N=200, K=256)"
    )
    assert deepgemm_refusal(120, 7168, 18432, "bfloat16", "kolibri1") == (
        "vLLM turns DeepGEMM off for model type kolibri1 on sm120"
    )


def test_selected_kernel_lines() -> None:
    assert selected_kernel(
        PREFIX + "Selected MarlinFP8ScaledMMLinearKernel for Fp8LinearMethod"
    ) == ("MarlinFP8ScaledMMLinearKernel", "Fp8LinearMethod")
    # A per-tensor FP8 kernel is not one of the block-FP8 list.
    assert selected_kernel(PREFIX + "Selected CutlassFP8ScaledMMLinearKernel for Fp8Linear") is None
    assert selected_kernel("nothing here") is None
    assert kernel_verdict((), None) is None


def test_a_triton_log_says_the_files_are_read() -> None:
    """A Marlin log says they are not: tests/cli/test_compare_cli.py."""
    triton = scan_lines([PREFIX + "Selected TritonFp8BlockScaledMMKernel for Fp8LinearMethod"])
    assert triton.kernel_line.endswith("the tuned files are read with this server's settings.")
    flag = scan_lines(["INFO non-default args: {'model': 'x', 'linear_backend': 'triton'}"])
    assert (flag.linear_kernels, flag.linear_backend) == ((), "triton")
    assert flag.kernel_line == (
        "vLLM was started with linear_backend triton: the tuned files are read with this "
        "server's settings."
    )


def test_old_and_unknown_devices():
    assert device_advice("NVIDIA_A100-SXM4-80GB").lines() == [
        "NVIDIA_A100-SXM4-80GB is sm80 (A100: compute capability 8.0, from the table of known "
        "GPUs): below sm89 there is no FP8 dot, so these files cannot run there."
    ]
    assert device_advice("NVIDIA_B300").lines()[0] == (
        "NVIDIA_B300: architecture not known (no compute capability in the store or the table "
        "of known GPUs)."
    )


def test_a_new_architecture_is_a_row_of_known_gpus_and_one_of_shared_memory(monkeypatch) -> None:
    # docs/contributing.md, "A new GPU or GPU architecture": B300 is compute capability 10.3,
    # with 227 KiB of opt-in shared memory per block (CUDA C++ Programming Guide).
    monkeypatch.setitem(KNOWN_GPUS, "B300", 103)
    monkeypatch.setitem(MAX_SHARED_BYTES, 103, 227 * 1024)
    found = device_arch("NVIDIA_B300", [])
    assert (found.arch, found.shared_bytes) == (103, 232448)
    assert found.source == "from the table of known GPUs, B300"
    assert device_advice("NVIDIA_B300").lines()[0] == (
        "NVIDIA_B300 is sm100/sm120 (B300: compute capability 10.3, from the table of known GPUs)."
    )
    config = KernelConfig(64, 128, 128, 32, 4, 3)
    over = CompileInfo(103, config, 232449, 128, 0, 1.0)
    assert launch_problem(over).error == (
        "pruned before launch: shared memory 232449 bytes > 232448 bytes per block on sm103"
    )
