"""--device, --replay and --kernel resolved for a command: the device once (what the workers
and the files carry), the runner that measures on it, whose kernels are timed here."""

from __future__ import annotations

from pathlib import Path

import typer

from tuner.cli.errors import fail
from tuner.cli.options import KernelChoice
from tuner.core import ResolvedDevice


def resolve_kernel_choice(choice: KernelChoice) -> tuple[str, str]:
    """(source, space label) of --kernel here (`tuner.kernels.source.choose_kernel`); exit 2."""
    from tuner.kernels.source import choose_kernel, kernel_label

    try:
        chosen = choose_kernel(choice.value)
    except ValueError as exc:
        raise fail(str(exc), 2) from None
    if chosen.note:  # auto took the builtin beside an installed vLLM: say why
        typer.echo(f"note: {chosen.note}", err=True)
    return chosen.source, kernel_label(chosen.source)


def resolve_device(device: str, replay: Path | None, *, need_device: bool = True,
                   plan_only: bool = False) -> tuple[str, ResolvedDevice]:
    """(backend, device) for --device and --replay: the device resolved once
    (`tuner.inputs.devices.resolve_device`), carried by the command to its workers and files.

    With need_device=False a GPU model that no visible GPU matches is still accepted (its vLLM
    key, for creating a sweep that workers on other hosts run). With plan_only (`tuner sweep
    --dry-run`) the GPUs are looked up as the run would: the matching ones are planned for;
    when none matches, one note line on stderr says so and the plan is for one such GPU.

    Returns:
        (backend: "replay", "interpreter" or "cuda"; the device, whose `visible_ids` are the
        workers' CUDA_VISIBLE_DEVICES entries).

    Raises:
        typer.Exit: exit 2 with one line: no visible GPU matches (need_device, not plan_only),
            a landscape of another device, a name that is no GPU model.
    """
    from tuner.inputs.devices import matches
    from tuner.inputs.devices import resolve_device as resolve_named

    if replay is not None:
        from tuner.measure.landscape import load_landscape

        try:
            landscape = load_landscape(replay)
        except ValueError as exc:
            raise fail(str(exc)) from None
        if not matches(device, landscape.device_name):
            raise fail(f"--device {device} does not name the landscape's device "
                       f"{landscape.device_name}")
        return "replay", ResolvedDevice(landscape.device_name, visible_ids=(None,))
    from tuner.run.gpus import visible_gpus

    try:
        resolved, note = resolve_named(device, visible_gpus, need_device=need_device,
                                       plan_only=plan_only)
    except ValueError as exc:
        raise fail(str(exc)) from None
    if note is not None:
        typer.echo(note, err=True)
    return ("interpreter" if resolved.interpreter else "cuda"), resolved


def resolve_runner(device: str, replay: Path | None, *, interpreter_reps: int = 3,
                   need_device: bool = True, plan_only: bool = False):
    """(runner, device) for --device and --replay: `resolve_device`'s backend name parsed,
    here and only here, into its runner (`tuner.measure.runners.make_runner`), whose
    device_name is the resolved device's.

    Raises:
        typer.Exit: exit 2 with one line, as `resolve_device`.
    """
    from tuner.measure.runners import make_runner

    backend, resolved = resolve_device(device, replay, need_device=need_device,
                                       plan_only=plan_only)
    try:
        runner = make_runner(backend, device_name=resolved.device_name,
                             landscape=None if replay is None else str(replay),
                             interpreter_reps=interpreter_reps)
    except ValueError as exc:
        raise fail(str(exc)) from None
    return runner, resolved
