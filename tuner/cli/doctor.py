"""`tuner doctor`: one screen saying whether tuning on this machine changes what vLLM runs."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated

import typer

from tuner.cli.errors import fail
from tuner.cli.output import plain

if TYPE_CHECKING:
    from tuner.kernels.serving import ModelAsked

_ARCH = re.compile(r"sm(\d{2,3})")


ArchOpt = Annotated[
    str | None,
    typer.Option(
        "--arch",
        help="GPU architecture to answer for without that GPU: sm89, sm90, sm100, "
        "sm120 [default: the visible GPU's].",
    ),
]
DeviceOpt = Annotated[
    str | None,
    typer.Option(
        "--device",
        help="GPU model vLLM serves on (L20, H200, ...) [default: the visible "
        "GPU]; without a GPU and --arch, a known model gives the architecture.",
    ),
]
LinearBackendOpt = Annotated[
    str | None,
    typer.Option(
        "--linear-backend",
        help="The server's --linear-backend: triton makes it read the dense files.",
    ),
]
NoCompileOpt = Annotated[
    bool,
    typer.Option(
        "--no-compile",
        help="Skip compiling the builtin and vLLM's dense and fused-MoE "
        "kernels for the architecture (about 20 s without a GPU).",
    ),
]
ModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model",
        help="Model key from `tuner shapes list`: vLLM's kernel choice is asked "
        "for its weight shapes and model type, as its server makes it [default: one "
        "DeepSeek-V3 layer].",
    ),
]
TpOpt = Annotated[int | None, typer.Option(help="Tensor-parallel size of --model (which shapes).")]


def doctor(
    arch: ArchOpt = None,
    device: DeviceOpt = None,
    linear_backend: LinearBackendOpt = None,
    no_compile: NoCompileOpt = False,
    model: ModelOpt = None,
    tp: TpOpt = None,
) -> None:
    """GPUs, versions, the kernels vLLM runs by default on the architecture, whether the tuned
    files are read and what makes them read, and whether the builtin kernels compile to
    vLLM's code. Exit 0 when tuning here will change what vLLM runs, 1 with the reason when
    it will not. A `warning:` line says when --device's GPU is another architecture than
    --arch, and when the installed Triton is not the one vLLM 0.33.0 runs with (torch 2.14.0's
    triton 3.8; with vLLM importable, the one its metadata requires)."""
    from tuner.compare.doctor import diagnose

    asked, linear_backend = _checked_options(arch, tp, model, linear_backend)
    versions, gpus = _installed()
    device_name = _device_key(device) if device is not None else None
    lines = [
        f"{g.index}: {g.gpu_name} (sm{g.compute_capability.replace('.', '')}, {g.device_name})"
        for g in gpus
    ]
    arch_from = "--arch" if arch is not None else "the visible GPU"
    if gpus:
        arch = arch or f"sm{gpus[0].compute_capability.replace('.', '')}"
        device_name = device_name or gpus[0].device_name
    elif arch is None and device_name is not None:
        arch = _known_arch(device_name)
    found = diagnose(
        arch=arch,
        device_name=device_name,
        gpus=lines,
        versions=versions,
        linear_backend_triton=linear_backend == "triton",
        compare=not no_compile,
        model=asked,
        arch_from=arch_from,
    )
    for line in found.lines:
        plain(line)
    for warning in found.warnings:
        typer.echo(f"warning: {warning}", err=True)
    if found.reasons:
        for reason in found.reasons:
            typer.echo(f"tuning here will not change what vLLM runs: {reason}", err=True)
        raise typer.Exit(1)
    plain(f"tuning here changes what vLLM runs: its {' and '.join(found.helps)} files")


def _checked_options(
    arch: str | None, tp: int | None, model: str | None, linear_backend: str | None
) -> tuple[ModelAsked | None, str | None]:
    """--arch, --tp, --model and --linear-backend checked: the model asked about (None without
    --model) and the backend's canonical value; a bad one exits with one line."""
    from tuner.inputs.backends import linear_backend_value
    from tuner.inputs.shapes import ShapesFileError, UnknownModelError, load_shapes
    from tuner.kernels.serving import ModelAsked

    if arch is not None and _ARCH.fullmatch(arch) is None:
        raise fail(f"--arch {arch!r} is not an architecture such as sm89 or sm90")
    if tp is not None and model is None:
        raise fail("--tp needs --model")
    try:
        asked = ModelAsked.of(load_shapes(model, tp)) if model is not None else None
    except (UnknownModelError, ShapesFileError) as exc:
        raise fail(str(exc).strip("'\"")) from None
    if linear_backend is not None:
        try:
            linear_backend = linear_backend_value(linear_backend)
        except ValueError as exc:
            raise fail(str(exc)) from None
    return asked, linear_backend


def _device_key(device: str) -> str:
    """vLLM's device key of --device; not a GPU model name exits with one line."""
    from tuner.inputs.devices import gpu_device_key

    try:
        return gpu_device_key(device)
    except ValueError:
        raise fail(f"--device {device!r} is not a GPU model name such as L20") from None


def _known_arch(device_name: str) -> str | None:
    """ "sm89" and so on for a GPU model in the table of known GPUs
    (`tuner.kernels.gpus.KNOWN_GPUS`), e.g. NVIDIA_L20; None for another model."""
    from tuner.kernels.gpus import known_capability

    capability = known_capability(device_name)
    return None if capability is None else f"sm{capability}"


def _installed():
    """(torch, triton and CUDA versions, visible GPUs); "" and [] where not installed."""
    import importlib.metadata

    versions = {}
    for name in ("torch", "triton"):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = ""
    gpus = []
    if versions["torch"]:
        import torch

        from tuner.run.gpus import visible_gpus

        versions["cuda"] = torch.version.cuda or ""
        gpus = visible_gpus()
    return versions, gpus
