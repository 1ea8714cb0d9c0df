"""`tuner doctor`: one screen saying whether tuning on this machine changes what vLLM runs."""

from __future__ import annotations

import importlib.metadata
import re
from typing import Annotated

import typer

from tuner.cli.errors import fail
from tuner.cli.options import TpOpt
from tuner.cli.output import plain
from tuner.compare.doctor import diagnose
from tuner.inputs.backends import linear_backend_value
from tuner.inputs.devices import resolve_device
from tuner.inputs.shapes import ShapesFileError, UnknownModelError, load_shapes
from tuner.kernels.gpus import known_capability
from tuner.kernels.serving import Diagnosis
from tuner.kernels.vllm_table import capability_number
from tuner.run import gpus as run_gpus

ArchOpt = Annotated[
    str | None,
    typer.Option(
        help="GPU architecture to answer for: sm89, sm90, sm100, sm120 [default: the "
        "visible GPU's]."
    ),
]
DeviceOpt = Annotated[
    str | None,
    typer.Option(
        help="GPU model vLLM serves on (L20, H200, ...) [default: the visible GPU]; "
        "without a GPU and --arch, a known model gives the architecture."
    ),
]
LinearBackendOpt = Annotated[
    str | None,
    typer.Option(help="The server's --linear-backend: triton makes it read the dense files."),
]
ModelOpt = Annotated[
    str | None,
    typer.Option(
        help="Model key (`tuner shapes list`) whose weight shapes and model type vLLM's "
        "kernel choice is told for, per shape."
    ),
]


def doctor(
    arch: ArchOpt = None,
    device: DeviceOpt = None,
    linear_backend: LinearBackendOpt = None,
    model: ModelOpt = None,
    tp: TpOpt = None,
) -> None:
    """GPUs, versions, the kernels vLLM runs by default on the architecture, and whether the
    tuned files are read and what makes them read. Exit 0 when tuning here will change what
    vLLM runs, 1 with the reason when it will not."""
    found = _findings(arch, device, linear_backend, model, tp)
    for line in found.lines:
        plain(line)
    for reason in found.reasons:
        typer.echo(f"tuning here will not change what vLLM runs: {reason}", err=True)
    if found.reasons:
        raise typer.Exit(1)
    plain(f"tuning here changes what vLLM runs: its {' and '.join(found.helps)} files")


def _findings(
    arch: str | None,
    device: str | None,
    linear_backend: str | None,
    model: str | None,
    tp: int | None,
) -> Diagnosis:
    """The options checked (a bad one exits 2 with one line), the visible GPUs (which answer
    what --arch and --device do not) and versions here, and `diagnose`'s findings of them."""
    if arch is not None and re.fullmatch(r"sm\d{2,3}", arch) is None:
        raise fail(f"--arch {arch!r} is not an architecture such as sm89 or sm90")
    if tp is not None and model is None:
        raise fail("--tp needs --model")
    try:
        asked = load_shapes(model, tp) if model is not None else None
        backend = linear_backend_value(linear_backend) if linear_backend is not None else None
        device_name = (
            resolve_device(device, list, need_device=False)[0].device_name if device else None
        )
    except (UnknownModelError, ShapesFileError, ValueError) as exc:
        raise fail(str(exc).strip("'\"")) from None
    versions = {name: _installed(name) for name in ("torch", "triton")}
    gpus = []
    if versions["torch"]:
        import torch  # optional: doctor answers without it, from --arch

        versions["cuda"], gpus = torch.version.cuda or "", run_gpus.visible_gpus()
    if gpus:
        arch = arch or f"sm{capability_number(gpus[0].compute_capability)}"
        device_name = device_name or gpus[0].device_name
    elif arch is None and device_name is not None:
        known = known_capability(device_name)
        arch = f"sm{known}" if known else None
    lines = [
        f"{g.index}: {g.gpu_name} (sm{capability_number(g.compute_capability)}, {g.device_name})"
        for g in gpus
    ]
    return diagnose(
        arch,
        lines,
        versions,
        device_name=device_name,
        model=asked,
        linear_backend_triton=backend == "triton",
    )


def _installed(name: str) -> str:
    """The installed distribution's version; "" when not installed."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return ""
