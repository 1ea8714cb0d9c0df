"""The registry of runners: a runner's name (the string of the CLI's --device/--replay, e.g.
"cuda") -> the factory of its `Runner`, parsed once where the command reads it, as optuna names
its samplers. A test registers a runner of its own under a name (`register_runner`)."""

from __future__ import annotations

from collections.abc import Callable

from tuner.measure.runners.base import Runner
from tuner.measure.runners.gpu import GpuRunner
from tuner.measure.runners.interpreter import InterpreterRunner
from tuner.measure.runners.replay import ReplayRunner

# A runner's name -> a factory of its runner (`register_runner` adds one).
RunnerFactory = Callable[..., Runner]
_RUNNERS: dict[str, RunnerFactory] = {
    cls.name: cls.from_options for cls in (GpuRunner, InterpreterRunner, ReplayRunner)
}


def register_runner(name: str, factory: RunnerFactory) -> None:
    """Make `make_runner(name, ...)` call `factory(device_name=..., landscape=...,
    interpreter_reps=...)`, in place of the runner registered under that name before.

    Args:
        name: the runner's name, as the CLI gives it.
        factory: keyword arguments `device_name` (str), `landscape` (str or None) and
            `interpreter_reps` (int); returns a `Runner`.
    """
    _RUNNERS[name] = factory


def runner_factory(name: str) -> RunnerFactory:
    """The factory registered for `name`.

    Raises:
        ValueError: no runner has that name.
    """
    try:
        return _RUNNERS[name]
    except KeyError:
        known = ", ".join(sorted(_RUNNERS))
        raise ValueError(f"unknown runner {name!r} (known: {known})") from None


def make_runner(
    name: str, *, device_name: str, landscape: str | None = None, interpreter_reps: int = 3
) -> Runner:
    """Parse a runner's name into its runner: the one place a name becomes behaviour.

    Args:
        name: "cuda", "interpreter" or "replay" (or a name given to `register_runner`).
        device_name: vLLM's key of the device measured on, as the command resolved it
            (`tuner.inputs.devices`).
        landscape: the landscape file a replay answers from.
        interpreter_reps: timed calls per trial on the interpreter.

    Returns:
        The runner.

    Raises:
        ValueError: an unknown name, or a replay without a landscape.
    """
    return runner_factory(name)(
        device_name=device_name, landscape=landscape, interpreter_reps=interpreter_reps
    )
