"""The kernels tuner compare times, on the CPU: our Triton kernel under the interpreter and the
torch stand-in are checked against the float64 reference by the same runner."""

from __future__ import annotations

import torch

from tuner.compare.backends import (
    TORCH_CPU,
    TORCH_SCALED_MM,
    TRITON_DEFAULT,
    Candidate,
    CandidateRunner,
    library_kernels,
)
from tuner.core import TrialStatus
from tuner.kernels.accuracy import relative_error
from tuner.kernels.dense.space import default_config
from tuner.measure.runner import Problem


def test_library_on_the_cpu() -> None:
    kernels, unavailable = library_kernels("cpu")
    assert list(kernels) == [TORCH_CPU]
    # torch 2.13's CPU build runs only tensor-wise and row-wise scaled_mm.
    assert unavailable[TORCH_SCALED_MM].startswith("cannot run here: RuntimeError: torch ")
    assert unavailable["vllm-cutlass"] == "CPU run: vLLM's GPU kernels are not timed"


def test_triton_and_torch_pass_the_same_check() -> None:
    kernels, _ = library_kernels("cpu")
    problem = Problem(M=3, N=200, K=256)  # N not a multiple of 128: a partial scale block
    runner = CandidateRunner(problem, device="cpu", library=kernels, interpreter_reps=1)
    triton = runner.check(Candidate(TRITON_DEFAULT, default_config()))
    torch_cpu = runner.check(Candidate(TORCH_CPU))
    assert (triton.status, torch_cpu.status) == (TrialStatus.OK, TrialStatus.OK)
    # bf16 output: both within bf16 rounding of the float64 reference.
    assert triton.rel_error < 5e-3 and torch_cpu.rel_error < 5e-3
    inputs = runner.workload.inputs
    out = kernels[TORCH_CPU](inputs.A, inputs.As, inputs.B, inputs.Bs, torch.bfloat16, (128, 128))
    assert out.shape == (3, 200) and out.dtype == torch.bfloat16
    assert relative_error(out, runner.reference) == torch_cpu.rel_error
    assert runner.sample_us(Candidate(TORCH_CPU)) > 0


def test_a_wrong_library_kernel_fails_its_check() -> None:
    def zeros(A, As, B, Bs, out_dtype, block_shape):
        return torch.zeros(A.shape[0], B.shape[0], dtype=out_dtype)

    runner = CandidateRunner(
        Problem(M=2, N=128, K=128), device="cpu", library={"torch-scaled_mm": zeros}
    )
    result = runner.check(Candidate("torch-scaled_mm"))
    assert result.status is TrialStatus.WRONG_RESULT
    assert result.rel_error == 1.0
