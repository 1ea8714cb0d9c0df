"""vLLM's Marlin and Humming classes as compare's library kernels, through the stand-in vLLM:
weights processed before any timed region, only apply_weights timed, the product checked
against the float64 reference; without vLLM, nothing of it."""

from __future__ import annotations

import importlib
import sys

import pytest
import torch

from tests.standin_vllm import CAPABILITY_VARIABLE, append, build_standin, importable
from tuner.compare.backends import Candidate, CandidateRunner, library_kernels
from tuner.compare.vllm_linear import VLLM_HUMMING, VLLM_MARLIN, LayerKernel, layer_kernels
from tuner.core import TrialStatus
from tuner.kernels.accuracy import relative_error
from tuner.measure.runner import Problem

MARLIN = "vllm.model_executor.kernels.linear.scaled_mm.marlin"


@pytest.fixture
def standin(tmp_path, monkeypatch):
    """The stand-in vLLM on sys.path, seeing an sm89 GPU (vLLM's Marlin runs only on CUDA, and
    its VllmConfig needs a device); its modules dropped from sys.modules afterwards."""
    monkeypatch.setenv(CAPABILITY_VARIABLE, "8.9")
    with importable(build_standin(tmp_path / "site"), monkeypatch) as root:
        yield root


def test_without_vllm_nothing_is_built() -> None:
    assert layer_kernels() is None
    _, unavailable = library_kernels("cpu")
    assert unavailable[VLLM_MARLIN] == "CPU run: vLLM's GPU kernels are not timed"
    assert VLLM_HUMMING not in unavailable


def test_inside_vllm_marlin_is_built_and_humming_says_why_not(standin) -> None:
    kernels, unavailable = layer_kernels()
    assert list(kernels) == [VLLM_MARLIN] and isinstance(kernels[VLLM_MARLIN], LayerKernel)
    assert unavailable == {VLLM_HUMMING: "HummingFP8ScaledMMLinearKernel: Humming is not installed"}
    assert layer_kernels((64, 128)) == (
        {},
        {
            VLLM_MARLIN: "block_shape [64, 128]: only [128, 128] is wired to "
            "MarlinFP8ScaledMMLinearKernel",
            VLLM_HUMMING: "block_shape [64, 128]: only [128, 128] is wired to "
            "HummingFP8ScaledMMLinearKernel",
        },
    )
    library, missing = library_kernels("cpu")
    assert VLLM_MARLIN in library and VLLM_MARLIN not in missing
    assert missing[VLLM_HUMMING] == unavailable[VLLM_HUMMING]


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
    kernels, _ = library_kernels("cpu")
    problem = Problem(M=3, N=200, K=256)  # N not a multiple of 128: a partial scale block
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
    # What it computed: bf16 activations A * As times the dequantized weight.
    inputs = runner.workload.inputs
    B, Bs = runner.weights[0]
    x = inputs.A.double() * inputs.As.double().repeat_interleave(128, 1)[:, :256]
    w = B.double() * Bs.double().repeat_interleave(128, 0).repeat_interleave(128, 1)[:200, :256]
    out = runner.library[VLLM_MARLIN](inputs.A, inputs.As, B, Bs, torch.bfloat16, (128, 128))
    assert out.dtype == torch.bfloat16 and out.shape == (3, 200)
    assert relative_error(out, (x @ w.t()).to(torch.bfloat16)) < 5e-3
    assert relative_error(out, runner.reference) == checked.rel_error


def test_each_runner_gets_its_own_layers(standin) -> None:
    kernels, _ = library_kernels("cpu")
    first = CandidateRunner(Problem(M=2, N=128, K=128), device="cpu", library=kernels)
    second = CandidateRunner(Problem(M=2, N=256, K=128), device="cpu", library=kernels)
    assert first.library[VLLM_MARLIN] is not second.library[VLLM_MARLIN]
    assert first.check(Candidate(VLLM_MARLIN)).status is TrialStatus.OK
    assert second.check(Candidate(VLLM_MARLIN)).status is TrialStatus.OK
    assert kernels[VLLM_MARLIN]._layers == {}


# vLLM 0.33.0's config/vllm.py names: VllmConfig, set_current_vllm_config(vllm_config, ...).
_CONFIG = """
import contextlib as _contextlib

CURRENT = []
MADE = []


class VllmConfig:
    def __init__(self):
        MADE.append(self)


@_contextlib.contextmanager
def set_current_vllm_config(vllm_config, check_compile=False, prefix=None):
    CURRENT.append(vllm_config)
    try:
        yield
    finally:
        CURRENT.pop()
"""


def test_the_kernel_is_built_and_processed_under_one_current_vllm_config(
    standin, monkeypatch
) -> None:
    package = standin / "vllm" / "config"
    append(standin, "vllm.config.__init__" if package.is_dir() else "vllm.config", _CONFIG)
    importlib.invalidate_caches()
    marlin = importlib.import_module(MARLIN)
    config = importlib.import_module("vllm.config")
    seen = []
    process = marlin.MarlinFP8ScaledMMLinearKernel.process_weights_after_loading

    def recording(self, layer):
        seen.append(list(config.CURRENT))
        process(self, layer)

    monkeypatch.setattr(
        marlin.MarlinFP8ScaledMMLinearKernel, "process_weights_after_loading", recording
    )
    kernels, _ = library_kernels("cpu")
    runner = CandidateRunner(
        Problem(M=2, N=128, K=128), device="cpu", library=kernels, interpreter_reps=1
    )
    assert runner.check(Candidate(VLLM_MARLIN)).status is TrialStatus.OK
    assert runner.sample_us(Candidate(VLLM_MARLIN)) > 0
    assert len(config.MADE) == 1 and seen == [config.MADE, config.MADE]
    assert config.CURRENT == []


def test_the_standin_adds_to_modules_another_part_wrote(tmp_path, monkeypatch) -> None:
    marlin = tmp_path / "site" / "vllm" / "model_executor" / "kernels" / "linear" / "scaled_mm"
    marlin.mkdir(parents=True)
    (marlin / "marlin.py").write_text("EARLIER = 1\n")
    root = build_standin(tmp_path / "site")
    assert (marlin / "marlin.py").read_text().startswith("EARLIER = 1\n")
    monkeypatch.setenv(CAPABILITY_VARIABLE, "8.9")
    monkeypatch.syspath_prepend(str(root))
    importlib.invalidate_caches()
    try:
        module = importlib.import_module(MARLIN)
        assert module.EARLIER == 1 and module.MarlinFP8ScaledMMLinearKernel.is_supported() == (
            True,
            None,
        )
    finally:
        for name in [n for n in sys.modules if n == "vllm" or n.startswith("vllm.")]:
            del sys.modules[name]
