"""Devices and the environments trials ran in: found or added by one race-safe statement each.

Re-exported by `db.repo`; like the repository functions these take a Session, are keyword-only,
and do not commit."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from db.connection import dialect_insert
from db.models import Device, Environment, ImportedFile, Sweep, utcnow
from tuner.core import DEVICE_NAME_MAX, is_device_name


def _check_device_name(device_name: str) -> None:
    """Refuse a name that is not vLLM's key as we store it (`tuner.core.is_device_name`); it ends
    up in file names, URLs, headers and shell lines."""
    if not is_device_name(device_name):
        raise ValueError(
            f"device_name {device_name!r:.160} must be vLLM's key, e.g. NVIDIA_L20 "
            f"or Intel(R)_Data_Center_GPU_Max_1550: 1..{DEVICE_NAME_MAX} printable "
            "ASCII characters without space, '\"', '/', '\\' or '..'"
        )


def known_device_names(session: Session) -> list[str]:
    """The device_name keys the store knows a device by: those with a sweep or an import (what
    a `--device` argument or a URL's device is matched against).

    Args:
        session: the open session.

    Returns:
        The names, sorted.
    """
    swept = select(Sweep.sweep_id).where(Sweep.device_id == Device.device_id).exists()
    imported = (
        select(ImportedFile.import_id).where(ImportedFile.device_id == Device.device_id).exists()
    )
    names = session.scalars(
        select(Device.device_name).where(swept | imported).order_by(Device.device_name)
    )
    return list(names)


def get_or_create_device(session: Session, *, device_name: str) -> int:
    """Find or add a device by its device_name key.

    Args:
        session: the open session.
        device_name: vLLM's key, e.g. `NVIDIA_L20`, or `TRITON_INTERPRETER`.

    Returns:
        The device_id.

    Raises:
        ValueError: the name is not vLLM's key as we store it: empty, over 128 characters, or
            holding whitespace, a control or non-ASCII character, '"', '/', '\\' or '..'.
    """
    _check_device_name(device_name)
    find = select(Device.device_id).where(Device.device_name == device_name)
    device_id = session.scalar(find)
    if device_id is None:
        session.execute(
            dialect_insert(session, Device)
            .values(device_name=device_name, created_at=utcnow())
            .on_conflict_do_nothing(index_elements=["device_name"])
        )
        device_id = session.scalars(find).one()
    return device_id


def get_or_create_environment(
    session: Session,
    *,
    device_name: str,
    gpu_name: str,
    compute_capability: str,
    driver: str,
    cuda: str,
    torch: str,
    triton: str,
    tuner: str,
    kernel_hash: str,
    kernel_source: str = "builtin",
    vllm: str = "",
) -> int:
    """Find or add the environment trials ran in; pass "" for a value that does not apply.

    An environment is found by its unique key (all but kernel_source and vllm): the first
    vLLM version that timed a kernel text is the one kept for it.

    Args:
        session: the open session.
        device_name: vLLM's device key.
        gpu_name: the GPU's name as the driver reports it, e.g. "NVIDIA L20".
        compute_capability: e.g. "8.9"; "" on the interpreter.
        driver: driver version.
        cuda: CUDA version torch was built with.
        torch: torch version.
        triton: triton version.
        tuner: this package's version.
        kernel_hash: hash of the kernel source.
        kernel_source: "builtin" or "vllm" (`tuner.kernels.source`).
        vllm: vLLM's version when kernel_source is "vllm", else "".

    Returns:
        The environment_id.
    """
    values = {
        "device_id": get_or_create_device(session, device_name=device_name),
        "gpu_name": gpu_name,
        "compute_capability": compute_capability,
        "driver": driver,
        "cuda": cuda,
        "torch": torch,
        "triton": triton,
        "tuner": tuner,
        "kernel_hash": kernel_hash,
    }
    find = select(Environment.environment_id).where(
        *(getattr(Environment, name) == value for name, value in values.items())
    )
    environment_id = session.scalar(find)
    if environment_id is None:
        session.execute(
            dialect_insert(session, Environment)
            .values(**values, kernel_source=kernel_source, vllm=vllm)
            .on_conflict_do_nothing(index_elements=list(values))
        )
        environment_id = session.scalars(find).one()
    return environment_id
