"""The kernels tuner compare times, on the CPU: our Triton kernel under the interpreter, the
torch stand-in and, through the stand-in vLLM, vLLM's Marlin class (weights processed before any
timed region, only apply_weights timed) checked against the float64 reference by one runner;
and vLLM's selection asked as a server asks it."""

from __future__ import annotations

import importlib

import pytest
import torch

from tests.standin_vllm import CAPABILITY_VARIABLE, build_standin, importable
from tuner.compare.backends import CandidateRunner, LayerKernel, library_kernels, vllm_choice
from tuner.compare.versus import (
    TORCH_CPU,
    TORCH_SCALED_MM,
    TRITON_DEFAULT,
    VLLM_CUTLASS,
    VLLM_HUMMING,
    VLLM_MARLIN,
    Candidate,
)
from tuner.core import TrialStatus
from tuner.kernels.dense.space import default_config
from tuner.measure.runner import Problem

MARLIN = "vllm.model_executor.kernels.linear.scaled_mm.marlin"


def test_on_the_cpu_triton_and_torch_pass_the_same_check_and_a_wrong_kernel_fails() -> None:
    kernels, unavailable = library_kernels("cpu")
    assert list(kernels) == [TORCH_CPU]
    # torch 2.13's CPU build runs only tensor-wise and row-wise scaled_mm.
    assert unavailable[TORCH_SCALED_MM].startswith("cannot run here: RuntimeError: torch ")
    assert unavailable[VLLM_CUTLASS] == "CPU run: vLLM's GPU kernels are not timed"
    assert unavailable[VLLM_MARLIN].startswith("MarlinFP8ScaledMMLinearKernel not importable")
    problem = Problem(M=3, N=200, K=256)  # N not a multiple of 128: a partial scale block
    runner = CandidateRunner(problem, device="cpu", library=kernels, interpreter_reps=1)
    triton = runner.check(Candidate(TRITON_DEFAULT, default_config()))
    torch_cpu = runner.check(Candidate(TORCH_CPU))
    assert (triton.status, torch_cpu.status) == (TrialStatus.OK, TrialStatus.OK)
    # bf16 output: both within bf16 rounding of the float64 reference.
    assert triton.rel_error < 5e-3 and torch_cpu.rel_error < 5e-3
    assert runner.sample_us(Candidate(TORCH_CPU)) > 0

    def zeros(A, As, B, Bs, out_dtype, block_shape):
        return torch.zeros(A.shape[0], B.shape[0], dtype=out_dtype)

    runner = CandidateRunner(Problem(M=2, N=128, K=128), device="cpu", library={"z": zeros})
    wrong = runner.check(Candidate("z"))
    assert (wrong.status, wrong.rel_error) == (TrialStatus.WRONG_RESULT, 1.0)


@pytest.fixture
def standin(tmp_path, monkeypatch):
    """The stand-in vLLM on sys.path, seeing an sm89 GPU (vLLM's Marlin runs only on CUDA, and
    its VllmConfig needs a device); its modules dropped from sys.modules afterwards."""
    monkeypatch.setenv(CAPABILITY_VARIABLE, "8.9")
    with importable(build_standin(tmp_path / "site"), monkeypatch) as root:
        yield root


class _Timer:
    """A timer that checks nothing but apply_weights runs in its timed region: 2 us each."""

    def __init__(self, marlin) -> None:
        self.marlin = marlin

    def start(self) -> None:
        self.counts = (len(self.marlin.PROCESSED), len(self.marlin.APPLIED))

    def stop(self) -> float:
        processed, applied = len(self.marlin.PROCESSED), len(self.marlin.APPLIED)
        assert (processed, applied) == (self.counts[0], self.counts[1] + 1)
        return 2e-6


def test_marlin_processes_each_weight_copy_untimed_and_matches_the_reference(standin) -> None:
    marlin = importlib.import_module(MARLIN)
    kernels, unavailable = library_kernels("cpu")
    assert isinstance(kernels[VLLM_MARLIN], LayerKernel)
    assert unavailable[VLLM_HUMMING] == "HummingFP8ScaledMMLinearKernel: Humming is not installed"
    assert library_kernels("cpu", (64, 128))[1][VLLM_MARLIN] == (
        "block_shape [64, 128]: only [128, 128] is wired to MarlinFP8ScaledMMLinearKernel"
    )
    problem = Problem(M=3, N=200, K=256)
    runner = CandidateRunner(
        problem,
        device="cpu",
        library=kernels,
        interpreter_reps=2,
        timer=_Timer(marlin),
    )
    checked = runner.check(Candidate(VLLM_MARLIN))
    assert checked.status is TrialStatus.OK and checked.rel_error < 5e-3
    assert marlin.PROCESSED == [(200, 256)] and marlin.APPLIED == [(3, 256)]
    assert runner.sample_us(Candidate(VLLM_MARLIN)) == 2.0
    # The interpreter plan rotates 2 weight copies: the clone was processed before timing.
    assert len(runner.weights) == 2 and marlin.PROCESSED == [(200, 256), (200, 256)]
    # each runner gets its own layers; the library's own kernel stays unprepared
    assert (
        runner.library[VLLM_MARLIN] is not kernels[VLLM_MARLIN]
        and kernels[VLLM_MARLIN]._layers == {}
    )


def test_vllms_selection_is_asked_for_a_block_fp8_layer_as_a_server_asks(
    tmp_path, monkeypatch
) -> None:
    """The stand-in's DeepGEMM takes a layer only with the server's model config (its type),
    the weight shape and the out dtype it is given: each is passed on."""
    deepgemm, cutlass = "DeepGemmFp8BlockScaledMMKernel", "CutlassFp8BlockScaledMMKernel"
    monkeypatch.setenv(CAPABILITY_VARIABLE, "9.0")
    with importable(build_standin(tmp_path / "site"), monkeypatch):
        assert vllm_choice(7168, 18432, "bfloat16", "deepseek_v3") == deepgemm
        assert vllm_choice(7168, 18432, "float16", "deepseek_v3") == cutlass
        assert vllm_choice(200, 256, "bfloat16", "deepseek_v3") == cutlass
        monkeypatch.setenv(CAPABILITY_VARIABLE, "10.0")
        assert vllm_choice(7168, 18432, "bfloat16", "qwen3_5_text") == cutlass
        monkeypatch.delenv(CAPABILITY_VARIABLE)  # VllmConfig() cannot infer a device type
        with pytest.raises(RuntimeError, match="Failed to infer device type"):
            vllm_choice(7168, 18432, "bfloat16", "deepseek_v3")
