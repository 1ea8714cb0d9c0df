"""The kernel families the tuner knows, by the name stored with each task. A new family
registers here and nowhere else."""

from __future__ import annotations

from tuner.kernels.dense.family import DENSE
from tuner.kernels.family import KernelFamily
from tuner.kernels.moe.family import MOE

FAMILIES: dict[str, KernelFamily] = {family.name: family for family in (DENSE, MOE)}
# The family of stored tasks and of sweeps that name none (a task row's default family).
DEFAULT_FAMILY = DENSE.name


def get_family(name: str) -> KernelFamily:
    """A registered family by name.

    Raises:
        ValueError: no family has that name (the message lists the known ones).
    """
    try:
        return FAMILIES[name]
    except KeyError:
        known = ", ".join(f"{key} ({family.title})" for key, family in FAMILIES.items())
        raise ValueError(f"unknown kernel family {name!r}; known: {known}") from None
