"""One interpreter trial measured on this host (tuner.measure.calibrate), in this process (the
suite runs under TRITON_INTERPRET=1) and in a child process."""

from __future__ import annotations

import os
import sys

import pytest

from tuner.kernels.config import KernelConfig
from tuner.measure import calibrate


def test_a_trial_runs_here_under_the_interpreter() -> None:
    assert os.environ.get("TRITON_INTERPRET") == "1"  # tests/conftest.py
    assert calibrate._runs_interpreted()
    seconds = calibrate.interpreter_trial_s(interpreter_reps=1)
    assert seconds is not None and 0 < seconds < 120


def test_elsewhere_it_runs_in_a_child_with_the_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(calibrate, "_runs_interpreted", lambda: False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(sys.path))
    seconds = calibrate.interpreter_trial_s(interpreter_reps=1)
    assert seconds is not None and 0 < seconds < 120
    monkeypatch.setattr(calibrate.sys, "executable", sys.executable + "-missing")
    assert calibrate.interpreter_trial_s(interpreter_reps=1) is None


def test_the_trials_are_the_default_familys_small_gemm_and_four_configs() -> None:
    problem, configs = calibrate.calibration_trials()
    assert (problem.M, problem.N, problem.K, problem.block_shape) == (16, 256, 256, (128, 128))
    assert (problem.out_dtype, problem.family, problem.params) == ("bfloat16", "dense", ())
    assert configs == [
        KernelConfig(64, 128, 128, 32, 4, 2),  # vLLM's default at M=16: its first call is dearest
        KernelConfig(16, 64, 128, 1, 4, 3),
        KernelConfig(32, 128, 128, 8, 4, 2),
        KernelConfig(64, 64, 64, 16, 8, 4),
    ]
