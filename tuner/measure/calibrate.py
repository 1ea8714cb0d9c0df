"""One interpreter trial measured on this host, now: what a sweep plan scales its interpreter
time model by before the store has trials of the device (the CPU's speed and its load vary
several times between hosts and hours)."""

from __future__ import annotations

import importlib
import json
import os
import statistics
import subprocess
import sys

from tuner.kernels.config import KernelConfig
from tuner.kernels.registry import DEFAULT_FAMILY, get_family
from tuner.kernels.shape import Shape
from tuner.measure.runner import KernelRunner, Problem

# The trials timed: a small GEMM (N, K, M) of the registry's default family, bf16 out, and
# three configs of vLLM's space (a sweep's trials are of distinct configs, each its first call:
# dearer than a repeat).
CALIBRATION_SHAPE = (256, 256, 16)
CALIBRATION_CONFIGS = ((16, 64, 128, 1, 4, 3), (32, 128, 128, 8, 4, 2), (64, 64, 64, 16, 8, 4))
_CHILD_S = 300  # a child that takes longer than this reports nothing


def _trial_here(interpreter_reps: int) -> float:
    """The mean `measure_s` of CALIBRATION_SHAPE's trials (bf16 out, the default family's):
    vLLM's default config first (its first call in the process is the dearest), then
    CALIBRATION_CONFIGS, as a sweep's task of that family measures them."""
    N, K, M = CALIBRATION_SHAPE
    runner = KernelRunner(Problem(M, N, K), device="cpu", interpreter_reps=interpreter_reps)
    default = get_family(DEFAULT_FAMILY).default_config(Shape(N, K, (128, 128)), M)
    configs = [default, *(KernelConfig(*config) for config in CALIBRATION_CONFIGS)]
    return statistics.mean(runner.evaluate(config).measure_s or 0.0 for config in configs)


def _runs_interpreted() -> bool:
    """True when this process's builtin kernel of the default family (its `kernel_module` and
    `kernel_function`) is Triton's interpreted function (TRITON_INTERPRET was 1 when it was
    imported), so a trial can run here."""
    family = get_family(DEFAULT_FAMILY)
    if family.kernel_module not in sys.modules:
        return os.environ.get("TRITON_INTERPRET") == "1"  # read when the kernel is defined
    from triton.runtime.interpreter import InterpretedFunction

    kernel = getattr(importlib.import_module(family.kernel_module), family.kernel_function)
    return isinstance(kernel, InterpretedFunction)


def interpreter_trial_s(interpreter_reps: int = 3) -> float | None:
    """Seconds of measuring one interpreter trial takes on this host now (`TrialResult.measure_s`:
    the check against the float64 reference and `interpreter_reps` timed calls) at
    CALIBRATION_SHAPE: the mean over vLLM's default and CALIBRATION_CONFIGS, one task's trials.

    Runs in this process when its Triton already runs the interpreter (or is not imported yet
    and TRITON_INTERPRET=1), else in a child process with TRITON_INTERPRET=1 (Triton reads it
    when a kernel is defined).

    Returns:
        Seconds, or None when the trial could not run (no torch or triton, a failed child).
    """
    try:
        if _runs_interpreted():
            return _trial_here(interpreter_reps)
    except ImportError:
        return None
    code = (
        "import json, sys; from tuner.measure.calibrate import _trial_here; "
        "print(json.dumps(_trial_here(int(sys.argv[1]))))"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, str(interpreter_reps)],
            env=dict(os.environ, TRITON_INTERPRET="1"),
            capture_output=True,
            text=True,
            timeout=_CHILD_S,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0 or not done.stdout.strip():
        return None
    return float(json.loads(done.stdout.strip().splitlines()[-1]))
