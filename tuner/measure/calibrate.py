"""One interpreter trial measured on this host, now: what a sweep plan scales its interpreter
time model by before the store has trials of the device (the CPU's speed and its load vary
several times between hosts and hours)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

# The trials timed: a small dense GEMM (N, K, M), bf16 out, and three configs of vLLM's space
# (a sweep's trials are of distinct configs, each its first call: dearer than a repeat).
CALIBRATION_SHAPE = (256, 256, 16)
CALIBRATION_CONFIGS = ((16, 64, 128, 1, 4, 3), (32, 128, 128, 8, 4, 2), (64, 64, 64, 16, 8, 4))
_CHILD_S = 300  # a child that takes longer than this reports nothing


def _trial_here(interpreter_reps: int) -> float:
    from tuner.kernels.config import KernelConfig
    from tuner.kernels.family import Shape
    from tuner.kernels.registry import DEFAULT_FAMILY, get_family
    from tuner.measure.runner import KernelRunner, Problem

    N, K, M = CALIBRATION_SHAPE
    runner = KernelRunner(
        Problem(M, N, K, (128, 128), "bfloat16"),
        runner_name="interpreter",
        interpreter_reps=interpreter_reps,
    )
    # As a sweep's task: vLLM's default first (its first call in the process is the dearest),
    # then other configs.
    configs = [
        get_family(DEFAULT_FAMILY).default_config(Shape(N, K, (128, 128)), M),
        *(KernelConfig(*config) for config in CALIBRATION_CONFIGS),
    ]
    times = [runner.evaluate(config).measure_s or 0.0 for config in configs]
    return sum(times) / len(times)


def _runs_interpreted() -> bool:
    """True when this process's builtin kernel is Triton's interpreted function (TRITON_INTERPRET
    was 1 when it was imported), so a trial can run here."""
    if "tuner.kernels.dense.kernel" not in sys.modules:
        return os.environ.get("TRITON_INTERPRET") == "1" and "triton" not in sys.modules
    from triton.runtime.interpreter import InterpretedFunction

    from tuner.kernels.dense.kernel import w8a8_block_fp8_matmul_kernel

    return isinstance(w8a8_block_fp8_matmul_kernel, InterpretedFunction)


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
