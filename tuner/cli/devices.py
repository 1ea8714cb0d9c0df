"""--device, --replay and --kernel resolved for a command: the device once
(`tuner.inputs.devices.resolve_device`), the runner that measures on it, whose kernels are timed."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

import typer

from db.repo import session_scope
from tuner.cli.errors import fail
from tuner.cli.store import device_in_store
from tuner.core import ResolvedDevice
from tuner.inputs.devices import matches, resolve_device
from tuner.kernels.registry import FAMILIES
from tuner.kernels.source import choose_kernel, kernel_label
from tuner.measure.landscape import load_landscape
from tuner.measure.runner import Runner, make_runner
from tuner.run import gpus


def resolve_kernel_choice(choice: str) -> tuple[str, str]:
    """(source, space label) of --kernel here (`tuner.kernels.source.choose_kernel`); exit 2."""
    try:
        source, note = choose_kernel(choice)
    except ValueError as exc:
        raise fail(str(exc)) from None
    if note:  # auto took the builtin beside an installed vLLM: say why
        typer.echo(f"note: {note}", err=True)
    return source, kernel_label(source)


def resolve_runner(
    device: str,
    replay: Path | None,
    *,
    interpreter_reps: int = 3,
    need_device: bool = True,
    plan_only: bool = False,
) -> tuple[Runner, ResolvedDevice]:
    """(runner, device) for --device and --replay: the device resolved once (a replay's is the
    landscape's), its runner made here and only here (`tuner.measure.runner.make_runner`).
    need_device and plan_only as `tuner.inputs.devices.resolve_device` takes them.

    Raises:
        typer.Exit: exit 2 with one line: no visible GPU matches, a landscape of another
            device, a name that is no GPU model.
    """
    try:
        if replay is not None:
            landscape = load_landscape(replay)
            if not matches(device, landscape.device_name):
                raise ValueError(
                    f"--device {device} does not name the landscape's device "
                    f"{landscape.device_name}"
                )
            name, resolved = "replay", ResolvedDevice(landscape.device_name, visible_ids=(None,))
        else:
            resolved, note = resolve_device(
                device, gpus.visible_gpus, need_device=need_device, plan_only=plan_only
            )
            if note is not None:
                typer.echo(note, err=True)
            name = "interpreter" if resolved.interpreter else "cuda"
        runner = make_runner(
            name,
            device_name=resolved.device_name,
            landscape=None if replay is None else str(replay),
            interpreter_reps=interpreter_reps,
        )
    except ValueError as exc:
        raise fail(str(exc)) from None
    return runner, resolved


def use_runner(runner: Runner, visible: Sequence[str | None]) -> None:
    """Make this process run the kernel where `runner` measures: the interpreter through
    `runner.pin` (before a family's kernel module is imported: triton.jit reads TRITON_INTERPRET
    then), or the GPU of `visible[0]` (CUDA is already up here, so by torch's device index).

    Raises:
        typer.Exit: exit 2 when the kernel was already loaded for the other kind of device.
    """
    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    if runner.on_gpu:
        if interpreted:
            raise fail("TRITON_INTERPRET=1 is set: unset it to verify on a GPU")
        import torch  # only to time here: `tuner --help` and the plans load no torch

        torch.cuda.set_device(
            next(gpu.index for gpu in gpus.visible_gpus() if gpu.visible_id == visible[0])
        )
        return
    if not interpreted and any(f.kernel_module in sys.modules for f in FAMILIES.values()):
        raise fail(
            "the kernel was already loaded for a GPU in this process; run "
            "`tuner verify --device interpreter` in a fresh process"
        )
    runner.pin(None)


def measuring_device(
    store, device: str, interpreter_reps: int = 3
) -> tuple[str, Runner, list[str | None]]:
    """The device `tuner verify` and `tuner compare` time on, resolved once: (its vLLM key,
    which the store must hold as it is, so the files checked are those of the GPU that times
    them; its runner; its CUDA_VISIBLE_DEVICES entries), this process made to run there.

    Raises:
        typer.Exit: exit 2 with one line, as `resolve_runner`, `device_in_store`, `use_runner`.
    """
    runner, resolved = resolve_runner(device, None, interpreter_reps=interpreter_reps)
    with session_scope(store) as session:
        device_name = device_in_store(session, resolved.device_name)
    use_runner(runner, resolved.visible_ids)
    return device_name, runner, list(resolved.visible_ids)
