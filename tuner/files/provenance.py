"""Which kernel and Triton the current winners must come from, without importing triton or torch.

Each family's kernel hash is computed from the text of its kernel module (e.g.
`tuner/kernels/dense/kernel.py`), so the HTTP service (which may have neither triton nor torch)
and the CLI agree with the hash the workers store for each family's trials.
"""

from __future__ import annotations

import functools
import importlib.metadata
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from packaging.version import InvalidVersion, Version

from tuner.core import minor_of, triton_minor
from tuner.kernels.registry import DEFAULT_FAMILY, FAMILIES, get_family
from tuner.kernels.source import BUILTIN, VLLM, vllm_version

if TYPE_CHECKING:
    from db.repo import EnvironmentRow


@dataclass(frozen=True)
class Provenance:
    """What current trials must match.

    Attributes:
        kernel_hash: the default family's kernel hash (what lines and the HTTP service show).
        triton_minor: Triton's major.minor, or None for any.
        other_hashes: the current hashes of the other families' kernels: a trial is current
            when its environment's hash is any of `hashes`.
        kernel_source: "builtin" or "vllm"; vllm: that vLLM's version, "" for the builtin.
    """

    kernel_hash: str
    triton_minor: str | None
    other_hashes: tuple[str, ...] = ()
    kernel_source: str = BUILTIN
    vllm: str = ""

    @property
    def hashes(self) -> tuple[str, ...]:
        """Every current kernel hash, the default family's first."""
        return (self.kernel_hash, *self.other_hashes)

    @property
    def source_label(self) -> str:
        """ "builtin", or "vllm 0.33.0": whose kernels the current trials timed."""
        return self.kernel_source if not self.vllm else f"{self.kernel_source} {self.vllm}"


@functools.cache
def family_kernel_hash(family_name: str) -> str:
    """sha256 hex digest of a family's kernel source, read from its module's text (no triton
    imported): equal to that module's `kernel_source_hash()`, the hash its trials record.

    Raises:
        ValueError: an unknown family.
    """
    return get_family(family_name).source(BUILTIN).kernel_hash


def current_kernel_hash() -> str:
    """The default family's `family_kernel_hash` (64 hex digits)."""
    return family_kernel_hash(DEFAULT_FAMILY)


def family_hashes(source: str = BUILTIN) -> dict[str, str]:
    """The current kernel hash of each registered family, the default family first: the
    builtin kernel modules' ("builtin") or the installed vLLM's kernels' ("vllm"; a family whose
    kernel this vLLM lacks is left out).

    Raises:
        ValueError: "vllm" where vLLM is not importable for the default family.
    """
    hashes = {}
    for family in sorted(FAMILIES.values(), key=lambda f: (f.name != DEFAULT_FAMILY, f.name)):
        try:
            builtin = source == BUILTIN
            hashes[family.name] = (
                family_kernel_hash(family.name) if builtin else family.source(VLLM).kernel_hash
            )
        except ValueError:
            continue
    return hashes


def installed_triton() -> str | None:
    """The installed triton package's version from its metadata (not imported), e.g. "3.6.0";
    None when triton is not installed."""
    try:
        return importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        return None


def installed_triton_minor() -> str | None:
    """Major.minor of `installed_triton`, e.g. "3.6"; None without triton or a readable
    version."""
    return _minor(installed_triton() or "")


def _minor(version: str) -> str | None:
    """`triton_minor` of a version, None for one that is not like 3.6.0."""
    return triton_minor(version) if minor_of(version) else None


def release_of(text: str) -> Version:
    """A version as `packaging` sorts it; Version("0") for one it cannot parse."""
    try:
        return Version(text)
    except InvalidVersion:
        return Version("0")


def read_source(environments: Iterable[EnvironmentRow], kernel: str = "auto") -> str:
    """Whose kernels the files of a device come from when read here: "builtin" or "vllm".

    "auto": vLLM's where vLLM is importable (the serving image); elsewhere vLLM's when the device
    has trials of vLLM's kernel, else the builtin. Sources never mix: the other's trials are stale.

    Raises:
        ValueError: `kernel` is not "auto", "vllm" or "builtin".
    """
    if kernel not in ("auto", VLLM, BUILTIN):
        raise ValueError(f"kernel must be auto, vllm or builtin, got {kernel!r}")
    if kernel != "auto":
        return kernel
    if vllm_version() is not None:
        return VLLM
    return VLLM if any(e.kernel_source == VLLM for e in environments) else BUILTIN


def _vllm_hashes(environments: list[EnvironmentRow]) -> tuple[tuple[str, ...], str]:
    """vLLM's kernel hashes (default family first) and version: the installed vLLM's, else
    those the newest vLLM version in the device's environments recorded."""
    installed = vllm_version()
    if installed is not None:
        return tuple(family_hashes(VLLM).values()), installed
    timed = [e for e in environments if e.kernel_source == VLLM]
    if not timed:
        return (), ""
    newest = max((e.vllm for e in timed), key=release_of)
    return tuple(dict.fromkeys(e.kernel_hash for e in timed if e.vllm == newest)), newest


def current_provenance(
    environments: Iterable[EnvironmentRow], *, installed_triton: str | None, kernel: str = "auto"
) -> Provenance:
    """The provenance current trials must have, on this machine, for one device.

    The kernel source is `read_source`'s; its hashes `family_hashes` (builtin) or
    `_vllm_hashes`. Triton's major.minor is the installed one; without triton (an HTTP service)
    the newest among the device's environments of a current hash, else None (any).

    Args:
        environments: the device's environments (`db.repo.device_environments`).
        installed_triton: `installed_triton_minor()`, or None when triton is not installed.
        kernel: "auto", "vllm" or "builtin" (`read_source`).
    """
    environments = list(environments)
    source = read_source(environments, kernel)
    if source == VLLM:
        found, version = _vllm_hashes(environments)
    else:
        found, version = tuple(family_hashes().values()), ""
    # No current kernel at all: a hash no trial has, so nothing is current.
    hashes = found or ("none",)
    minor: str | None = None
    if installed_triton is not None:
        minor = triton_minor(installed_triton)
    elif timed := {m for e in environments if e.kernel_hash in hashes and (m := _minor(e.triton))}:
        minor = max(timed, key=release_of)
    return Provenance(hashes[0], minor, hashes[1:], source, version)
