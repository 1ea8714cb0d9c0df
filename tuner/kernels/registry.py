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


def family_of_part(part: str) -> KernelFamily:
    """The registered family that tunes a part of a model (`FamilyShapes.model_part`), the
    first in registry order when several do.

    Args:
        part: `tuner.kernels.family.LINEAR_LAYERS` or `tuner.kernels.family.EXPERTS`.

    Raises:
        LookupError: no registered family tunes that part.
    """
    for family in FAMILIES.values():
        if family.shapes.model_part == part:
            return family
    raise LookupError(f"no kernel family tunes a model's {part}")


def family_of_file(name: str) -> KernelFamily:
    """The registered family one of whose parsers (`FamilyFiles.parse_file_name`) accepts a
    config file name, in either engine's spelling.

    Args:
        name: a bare file name, e.g. `E=128,N=384,device_name=NVIDIA_H200,...json`.

    Raises:
        ValueError: no family parses the name; the message is the default family's parse error.
    """
    for family in FAMILIES.values():
        try:
            family.files.parse_file_name(name)
        except ValueError:
            continue
        return family
    FAMILIES[DEFAULT_FAMILY].files.parse_file_name(name)  # raises its one-line error
    raise AssertionError(f"{DEFAULT_FAMILY} parsed {name!r} on the second try")


def respell_file_name(name: str, engine: str, device_name: str | None = None) -> str:
    """A config file name of any registered family as `engine` spells it
    (`KernelFamily.respell` of `family_of_file(name)`).

    Raises:
        ValueError: no family parses the name (as `family_of_file`), or an unknown engine.
    """
    return family_of_file(name).respell(name, engine, device_name)
