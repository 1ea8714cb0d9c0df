"""One interpreter trial measured on this host (tuner.measure.calibrate), in this process (the
suite runs under TRITON_INTERPRET=1) and in a child process."""

from __future__ import annotations

import os
import sys

import pytest

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
