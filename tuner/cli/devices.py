"""--device, --replay and --kernel resolved for a command: the device once (what the workers
and the files carry), the runner that measures on it, whose kernels are timed here."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from db.repo import session_scope
from tuner.cli.errors import fail
from tuner.cli.options import KernelChoice
from tuner.cli.store import stored_device
from tuner.core import ResolvedDevice
from tuner.inputs.devices import matches
from tuner.inputs.devices import resolve_device as resolve_named
from tuner.kernels.registry import FAMILIES
from tuner.kernels.source import choose_kernel, kernel_label
from tuner.measure.runners import make_runner
from tuner.run import gpus

if TYPE_CHECKING:
    from tuner.measure.runners import Runner


def resolve_kernel_choice(choice: KernelChoice) -> tuple[str, str]:
    """(source, space label) of --kernel here (`tuner.kernels.source.choose_kernel`); exit 2."""

    try:
        chosen = choose_kernel(choice.value)
    except ValueError as exc:
        raise fail(str(exc), 2) from None
    if chosen.note:  # auto took the builtin beside an installed vLLM: say why
        typer.echo(f"note: {chosen.note}", err=True)
    return chosen.source, kernel_label(chosen.source)


def resolve_device(
    device: str, replay: Path | None, *, need_device: bool = True, plan_only: bool = False
) -> tuple[str, ResolvedDevice]:
    """(runner name, device) for --device and --replay: the device resolved once
    (`tuner.inputs.devices.resolve_device`), carried by the command to its workers and files.

    With need_device=False a GPU model that no visible GPU matches is still accepted (its vLLM
    key, for creating a sweep that workers on other hosts run). With plan_only (`tuner sweep
    --dry-run`) the GPUs are looked up as the run would: the matching ones are planned for;
    when none matches, one note line on stderr says so and the plan is for one such GPU.

    Returns:
        (the runner's name: "replay", "interpreter" or "cuda"; the device, whose
        `visible_ids` are the workers' CUDA_VISIBLE_DEVICES entries).

    Raises:
        typer.Exit: exit 2 with one line: no visible GPU matches (need_device, not plan_only),
            a landscape of another device, a name that is no GPU model.
    """

    if replay is not None:
        from tuner.measure.landscape import load_landscape

        try:
            landscape = load_landscape(replay)
        except ValueError as exc:
            raise fail(str(exc)) from None
        if not matches(device, landscape.device_name):
            raise fail(
                f"--device {device} does not name the landscape's device {landscape.device_name}"
            )
        return "replay", ResolvedDevice(landscape.device_name, visible_ids=(None,))

    try:
        resolved, note = resolve_named(
            device, gpus.visible_gpus, need_device=need_device, plan_only=plan_only
        )
    except ValueError as exc:
        raise fail(str(exc)) from None
    if note is not None:
        typer.echo(note, err=True)
    return ("interpreter" if resolved.interpreter else "cuda"), resolved


def resolve_runner(
    device: str,
    replay: Path | None,
    *,
    interpreter_reps: int = 3,
    need_device: bool = True,
    plan_only: bool = False,
):
    """(runner, device) for --device and --replay: `resolve_device`'s runner name parsed,
    here and only here, into its runner (`tuner.measure.runners.make_runner`), whose
    device_name is the resolved device's.

    Raises:
        typer.Exit: exit 2 with one line, as `resolve_device`.
    """

    name, resolved = resolve_device(device, replay, need_device=need_device, plan_only=plan_only)
    try:
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
    """Make this process run the kernel on the interpreter, or on the first matching GPU.

    TRITON_INTERPRET must be set before a family's kernel module is imported (triton.jit reads
    it then).

    Args:
        runner: the command's runner (`resolve_runner`).
        visible: the resolved device's CUDA_VISIBLE_DEVICES entries; the first is used.

    Raises:
        typer.Exit: one line, exit 2, when the kernel was already loaded for the other kind
            of device in this process.
    """

    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    if not runner.on_gpu:
        loaded = any(family.kernel_module in sys.modules for family in FAMILIES.values())
        if loaded and not interpreted:
            raise fail(
                "the kernel was already loaded for a GPU in this process; run "
                "`tuner verify --device interpreter` in a fresh process"
            )
        runner.pin(None)
        return
    if interpreted:
        raise fail("TRITON_INTERPRET=1 is set: unset it to verify on a GPU")
    import torch

    index = next(gpu.index for gpu in gpus.visible_gpus() if gpu.visible_id == visible[0])
    torch.cuda.set_device(index)


def measuring_device(
    store, device: str, interpreter_reps: int
) -> tuple[str, Runner, list[str | None]]:
    """The device `tuner verify` and `tuner compare` time on in this process, resolved once
    (`resolve_runner`): its vLLM key, which must then be in the store as it is, its runner and
    its visible ids; the process made to run the kernel there (`use_runner`), before anything
    imports the kernel. The files checked are therefore always those of the GPU that times them.

    Args:
        store: the store's SQLAlchemy Engine (`tuner.cli.store.open_db`).
        device: --device as given.
        interpreter_reps: timed calls per trial on the interpreter.

    Returns:
        (vLLM's device key, in the store; the runner; the device's CUDA_VISIBLE_DEVICES
        entries).

    Raises:
        typer.Exit: exit 2 with one line, as `resolve_runner`, `stored_device`, `use_runner`.
    """

    runner, resolved = resolve_runner(device, None, interpreter_reps=interpreter_reps)
    with session_scope(store) as session:
        device_name = stored_device(session, device, resolved.device_name)
    visible = list(resolved.visible_ids)
    use_runner(runner, visible)
    return device_name, runner, visible
