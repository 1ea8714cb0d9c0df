"""The ways a sweep measures, behind one protocol (`Runner`): a live GPU, Triton's CPU
interpreter, a recorded landscape; and the registry that parses a runner's name into one."""

from tuner.measure.runners.base import ProblemRunner, Runner
from tuner.measure.runners.gpu import GpuRunner
from tuner.measure.runners.interpreter import InterpreterRunner
from tuner.measure.runners.registry import (
    RunnerFactory,
    make_runner,
    register_runner,
    runner_factory,
)
from tuner.measure.runners.replay import ReplayRunner

__all__ = [
    "GpuRunner",
    "InterpreterRunner",
    "ProblemRunner",
    "ReplayRunner",
    "Runner",
    "RunnerFactory",
    "make_runner",
    "register_runner",
    "runner_factory",
]
