"""Which kernel and Triton the current winners must come from, without importing triton or torch.

The kernel hash is computed from the text of each kernel family's kernel module (for the dense
GEMM `tuner/kernels/dense/kernel.py`, for the fused MoE `tuner/kernels/moe/kernel.py`), so the
HTTP service (which may have neither triton nor torch) and the CLI agree with the hash the
workers store for each family's trials (the modules' `kernel_source_hash`).
"""

from __future__ import annotations

import functools
import importlib.metadata
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from tuner.core import triton_minor
from tuner.core.hashing import kernel_source_hash
from tuner.kernels.registry import DEFAULT_FAMILY, FAMILIES, get_family
from tuner.kernels.source import BUILTIN, VLLM, function_source, vllm_version

# The default family's kernel, whose hash `Provenance.kernel_hash` shows (each environment
# records its own family's kernel's: tuner.run.worker.collect_environment).
_DEFAULT = get_family(DEFAULT_FAMILY)
KERNEL_FUNCTION = _DEFAULT.kernel_function

# major.minor at the start, not followed by another digit: "3.6.1+git" -> 3.6, "3.60" -> 3.60.


class EnvironmentLike(Protocol):
    """An environment trials ran in, as `db.repo.device_environments` lists them."""

    @property
    def triton(self) -> str: ...

    @property
    def kernel_hash(self) -> str: ...

    # Also read, where present (db.repo.EnvironmentRow has them): kernel_source, vllm.


@dataclass(frozen=True)
class Provenance:
    """What current trials must match: the kernel hash, and Triton's major.minor (None: any).

    Attributes:
        kernel_hash: the default family's kernel hash (what lines and the HTTP service show).
        triton_minor: Triton's major.minor, or None for any.
        other_hashes: the current hashes of the other families' kernels, in the order of
            `family_hashes` (`split_hashes`): each trial's environment records the hash of its
            own family's kernel, so a trial is current when its hash is any of `hashes`; a
            changed MoE kernel leaves old MoE trials stale and the dense ones current.
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


def kernel_source(text: str, name: str = KERNEL_FUNCTION) -> str:
    """The dedented source of a top-level function of a module's text, decorators included
    (`tuner.kernels.source.function_source`).

    Raises:
        LookupError: the module has no top-level function of that name.
    """
    return function_source(text, name)


def current_kernel_hash(path: Path | None = None) -> str:
    """sha256 hex digest of the default family's kernel source, equal to its kernel module's
    `kernel_source_hash()` (`tuner.kernels.dense.kernel` for the dense GEMM).

    Args:
        path: a kernel module to hash; None for the default family's kernel module (read once
            per process: the service asks on every request).

    Returns:
        64 lowercase hex digits.

    Raises:
        OSError: the file cannot be read.
        LookupError: it has no kernel function.
    """
    if path is None:
        return _package_kernel_hash()
    return kernel_source_hash(kernel_source(path.read_text(encoding="utf-8")))


@functools.cache
def _package_kernel_hash() -> str:
    return current_kernel_hash(_DEFAULT.module_path(_DEFAULT.kernel_module))


@functools.cache
def family_kernel_hash(family_name: str) -> str:
    """sha256 hex digest of a kernel family's kernel source (read from its module's text, so
    no triton or torch is imported), equal to that kernel module's `kernel_source_hash()`: the
    hash a worker records for the family's trials.

    Raises:
        ValueError: an unknown family.
        OSError, LookupError: as `current_kernel_hash`.
    """
    family = get_family(family_name)
    source = kernel_source(
        family.module_path(family.kernel_module).read_text(encoding="utf-8"), family.kernel_function
    )
    return kernel_source_hash(source)


def family_hashes(source: str = BUILTIN) -> dict[str, str]:
    """The current kernel hash of each registered family, by family name: the default
    family first, then the others by name.

    Args:
        source: "builtin" (each family's kernel module, `family_kernel_hash`) or "vllm" (the
            installed vLLM's kernel of each family, `KernelFamily.source`); a family whose
            kernel this vLLM lacks is left out (its trials cannot be current).

    Returns:
        family name -> 64 hex digits.

    Raises:
        ValueError: "vllm" where vLLM is not importable for the default family, or an unknown
            source.
    """
    if source not in (BUILTIN, VLLM):
        raise ValueError(f"source must be {BUILTIN} or {VLLM}, got {source!r}")
    hashes = {}
    ordered = sorted(FAMILIES.values(), key=lambda f: (f.name != DEFAULT_FAMILY, f.name))
    for family in ordered:
        if source == BUILTIN:
            hashes[family.name] = family_kernel_hash(family.name)
            continue
        try:
            hashes[family.name] = family.source(VLLM).kernel_hash
        except ValueError:
            continue
    return hashes


def split_hashes(hashes: Mapping[str, str]) -> tuple[str, tuple[str, ...]]:
    """(the default family's hash, the others' in order) of `family_hashes`: the
    `Provenance.kernel_hash` and `.other_hashes` fields, which the HTTP service shows.
    "none" (a hash no trial has) for the first when the default family has none."""
    others = tuple(digest for name, digest in hashes.items() if name != DEFAULT_FAMILY)
    return hashes.get(DEFAULT_FAMILY, "none"), others


def installed_triton_minor() -> str | None:
    """Major.minor of the installed triton package, read from its metadata (not imported).

    Returns:
        e.g. "3.6"; None when triton is not installed or its version is not readable.
    """
    try:
        return triton_minor(importlib.metadata.version("triton"))
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return None


def _minor_key(minor: str) -> tuple[int, int]:
    major, _, rest = minor.partition(".")
    return int(major), int(rest)


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:4])


def read_source(environments: Iterable[EnvironmentLike], kernel: str = "auto") -> str:
    """Whose kernels the files of a device come from when read here: "builtin" or "vllm".

    Rule for "auto": vLLM's where vLLM is importable (the serving image); elsewhere vLLM's
    when the device has trials of vLLM's kernel (a sweep inside the serving image beats the
    tuner's copies), else the builtin. Sources never mix: the other one's trials are stale.

    Args:
        environments: the device's environments (`db.repo.device_environments`).
        kernel: "auto", "vllm" or "builtin".

    Raises:
        ValueError: an unknown choice.
    """
    if kernel not in ("auto", VLLM, BUILTIN):
        raise ValueError(f"kernel must be auto, vllm or builtin, got {kernel!r}")
    if kernel != "auto":
        return kernel
    if vllm_version() is not None:
        return VLLM
    found = any(getattr(e, "kernel_source", BUILTIN) == VLLM for e in environments)
    return VLLM if found else BUILTIN


def _vllm_hashes(environments: list[EnvironmentLike]) -> tuple[tuple[str, ...], str]:
    """The kernel hashes of vLLM's kernels, the default family's first, and vLLM's version:
    the installed vLLM's where it is importable (`family_hashes`), else those of the newest
    vLLM version the device's environments recorded (no hash when there is none)."""
    installed = vllm_version()
    if installed is not None:
        return tuple(family_hashes(VLLM).values()), installed
    timed = [e for e in environments if getattr(e, "kernel_source", BUILTIN) == VLLM]
    if not timed:
        return (), ""
    newest = max((getattr(e, "vllm", "") for e in timed), key=_version_key)
    return tuple(
        dict.fromkeys(e.kernel_hash for e in timed if getattr(e, "vllm", "") == newest)
    ), newest


def current_provenance(
    environments: Iterable[EnvironmentLike],
    *,
    installed_triton: str | None,
    kernel_hash: str | None = None,
    kernel: str = "auto",
) -> Provenance:
    """The provenance current trials must have, on this machine, for one device.

    Rule: the kernel source is `read_source`'s. For the builtin source the kernel hashes are
    this package's, one per family (`family_hashes`; only `kernel_hash` when it is given);
    for vLLM's, those of the installed vLLM's kernels, or where vLLM is not importable (the
    HTTP service) those the newest vLLM version in the device's environments recorded.
    Triton's major.minor is the installed one; where triton is not installed (an HTTP service
    without the kernel extra), it is the newest major.minor among the device's environments
    that have a current kernel hash, and None (any Triton) when there is none: then no trial
    matches the kernel hash anyway.

    Args:
        environments: the device's environments (`db.repo.device_environments`).
        installed_triton: `installed_triton_minor()`, or None when triton is not installed.
        kernel_hash: the current (builtin) kernel hash; None computes it
            (`current_kernel_hash`). Given, the source is the builtin.
        kernel: "auto", "vllm" or "builtin" (`read_source`).

    Returns:
        The kernel source, hashes and Triton major.minor to filter winners with.
    """
    environments = list(environments)
    source = BUILTIN if kernel_hash is not None else read_source(environments, kernel)
    version = ""
    if source == VLLM:
        hashes, version = _vllm_hashes(environments)
        # No vLLM trial and no vLLM here: a hash no trial has, so nothing is current.
        current, others = (hashes[0], hashes[1:]) if hashes else ("none", ())
    else:
        current, others = (
            (kernel_hash, ()) if kernel_hash is not None else split_hashes(family_hashes())
        )
    provenance = Provenance(
        kernel_hash=current,
        triton_minor=None,
        other_hashes=others,
        kernel_source=source,
        vllm=version,
    )
    if installed_triton is not None:
        return replace(provenance, triton_minor=triton_minor(installed_triton))
    minors = set()
    for environment in environments:
        if environment.kernel_hash in (current, *others):
            try:
                minors.add(triton_minor(environment.triton))
            except ValueError:
                continue
    newest = max(minors, key=_minor_key) if minors else None
    return replace(provenance, triton_minor=newest)
