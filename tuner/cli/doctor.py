"""`tuner doctor`: one screen saying whether tuning on this machine changes what vLLM runs.
The GPUs, versions, vLLM's default kernels per family on the architecture (the tuner's table of
vLLM 0.33.0, which tests/engines checks against the wheel), whether the tuned files are read and
what makes them read, and the kernel source a sweep here would time. Facts, not a GPU run:
works with --arch alone. What is said of each family is the family's
(`tuner.kernels.family.KernelFamily.advice`: its hook, in the family's folder, on
`tuner.kernels.serving`). `_findings` gathers the facts, `doctor` prints them."""

from __future__ import annotations

import contextlib
import importlib.metadata
import re
from typing import Annotated

import typer
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from tuner.cli.errors import fail
from tuner.cli.options import TpOpt
from tuner.cli.output import plain
from tuner.inputs.backends import linear_backend_value
from tuner.inputs.devices import resolve_device
from tuner.inputs.shapes import ModelShapes, ShapesFileError, UnknownModelError, load_shapes
from tuner.kernels.gpus import known_capability
from tuner.kernels.registry import FAMILIES
from tuner.kernels.serving import Asked, Diagnosis
from tuner.kernels.source import PLACEHOLDER_FIX, vllm_triton_problem, vllm_version
from tuner.kernels.vllm_table import (
    ARCH_BACKENDS,
    TRITON_FLAG,
    arch_of,
    capability_number,
)
from tuner.run import gpus as run_gpus

ArchOpt = Annotated[str | None, typer.Option(help="sm89, sm90, sm100 or sm120 [default: GPU 0's].")]
DeviceOpt = Annotated[str | None, typer.Option(help="GPU model vLLM serves on [default: GPU 0].")]
LinearBackendOpt = Annotated[str | None, typer.Option(help="The server's --linear-backend.")]
ModelOpt = Annotated[str | None, typer.Option(help="Model key: vLLM's choice per shape.")]


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
    found = _findings(arch, *_asked(arch, device, linear_backend, model, tp))
    for line in found.lines:
        plain(line)
    for reason in found.reasons:
        typer.echo(f"tuning here will not change what vLLM runs: {reason}", err=True)
    if found.reasons:
        raise typer.Exit(1)
    plain(f"tuning here changes what vLLM runs: its {' and '.join(found.helps)} files")


def _findings(
    arch: str | None, device_name: str | None, asked: ModelShapes | None, triton: bool
) -> Diagnosis:
    """The facts doctor prints, given the options checked (`_asked`): the visible GPUs (which
    answer what --arch and --device do not), the versions here, the vLLM installed here and
    what the tuner's table says of the architecture (`advise`)."""
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
    out = Diagnosis()
    visible = "; ".join(
        f"{g.index}: {g.gpu_name} (sm{capability_number(g.compute_capability)}, {g.device_name})"
        for g in gpus
    )
    out.lines.append("GPUs: " + (visible or "none visible"))
    out.lines.append(f"architecture: {arch or 'unknown'}, device_name: {device_name or 'unknown'}")
    out.lines.append(
        f"torch {versions.get('torch') or 'not installed'}, triton "
        f"{versions.get('triton') or 'not installed'}, CUDA {versions.get('cuda') or 'none'}"
    )
    if arch is None:
        out.reasons.append("no GPU visible, no --arch and no --device of a known GPU model")
        return out
    _say_vllm(out)
    advise(out, arch, asked, triton)
    return out


def _asked(
    arch: str | None,
    device: str | None,
    linear_backend: str | None,
    model: str | None,
    tp: int | None,
) -> tuple[str | None, ModelShapes | None, bool]:
    """(vLLM's key of --device, --model's shapes, whether --linear-backend is triton); a bad
    option exits 2 with one line."""
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
    return device_name, asked, backend == "triton"


def advise(
    out: Diagnosis, arch: str, model: ModelShapes | None = None, triton: bool = False
) -> None:
    """What the tuner's table says of `arch` ("sm90"): each family's advice (`model`: the
    model vLLM serves; `triton`: the server runs with `--linear-backend triton`), and the
    reason when vLLM reads no tuned file there."""
    capability, table_arch = capability_number(arch) or 0, arch_of(arch)
    table = next((a for a in ARCH_BACKENDS if a.arch == table_arch), None)
    if table is None or table_arch is None:
        out.reasons.append(f"{arch} has no FP8 dot: the block-FP8 kernels cannot run")
        return
    asked = Asked(arch, capability, table_arch, table, model, triton)
    for family in FAMILIES.values():
        if family.advice:
            family.advice(out, asked)
    if not out.helps:
        out.reasons.append(f"vLLM on {arch} reads no tuned file unless started with {TRITON_FLAG}")


def _say_vllm(out: Diagnosis) -> None:
    """The line about the vLLM installed here and the Triton it runs with, and the reason when
    that is not the installed one."""
    version = vllm_version()
    if version is None:
        out.lines.append("vLLM: not importable here; a sweep here times the builtin kernels")
        return
    problem = vllm_triton_problem()
    spec = triton_needed()
    times = (
        f"times the builtin kernels (--kernel auto): {problem}; for --kernel vllm, "
        + PLACEHOLDER_FIX
        if problem
        else "times vLLM's installed kernels (--kernel auto)"
    )
    out.lines.append(
        f"vLLM {version}: requires triton {spec if spec is not None else 'unstated'}; "
        "a sweep here " + times
    )
    here = _installed("triton")
    if spec and here and not SpecifierSet(spec).contains(here, prereleases=True):
        out.reasons.append(f"triton {here} is installed but vLLM {version} requires triton {spec}")


def triton_needed() -> str | None:
    """The Triton specifier the importable vLLM runs with ("==3.8.0"; "" for any): the one its
    metadata names, else the installed torch's (vLLM 0.33.0 pins only torch, whose wheel pins
    triton); None when neither names triton."""
    for distribution in ("vllm", "torch"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            for requirement in map(Requirement, importlib.metadata.requires(distribution) or []):
                if requirement.name == "triton":
                    return str(requirement.specifier)
    return None


def _installed(name: str) -> str:
    """The installed distribution's version; "" when not installed."""
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        return importlib.metadata.version(name)
    return ""
