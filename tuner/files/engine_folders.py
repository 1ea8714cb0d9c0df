"""Where each release of vLLM and SGLang reads block-FP8 config files (pure).

Each kernel family lists where the engines read its files (`FamilyFiles.engine_folders`, rows of
engine, first version and folder under site-packages). A release reads from the row of its engine
with the highest first version not above its own, so the next move of a folder is one more row.
"""

from __future__ import annotations

import re

from packaging.version import InvalidVersion, Version

from tuner.kernels.engines import TRITON_PLACEHOLDER, EngineFolder
from tuner.kernels.registry import FAMILIES
from tuner.kernels.vllm_table import VLLM_VERSION

# The releases whose sources the families' rows were checked in, oldest and newest (the
# families' comments beside their rows say which): the newest is the default `--engine-version`.
CHECKED_RELEASES: dict[str, tuple[str, str]] = {
    "vllm": (VLLM_VERSION, VLLM_VERSION),
    "sglang": ("0.5.5", "0.5.23"),
}
DEFAULT_ENGINE_VERSIONS: dict[str, str] = {
    engine: newest for engine, (_, newest) in CHECKED_RELEASES.items()
}
_TRITON_RE = re.compile(r"[0-9]{1,4}\.[0-9]{1,4}\.[0-9]{1,4}")


def family_rows(engine: str, family: str) -> list[EngineFolder]:
    """The rows of a registered family's `engine_folders` for one engine, oldest first; [] for
    an unknown family or an engine that does not read its files."""
    registered = FAMILIES.get(family)
    rows = registered.files.engine_folders if registered is not None else ()
    return sorted(
        (row for row in rows if row.engine == engine),
        key=lambda row: version_key(row.first_version),
    )


def version_key(version: str) -> Version:
    """A release number that sorts as releases do ("0.5.15.post1" > "0.5.15"), pre-release,
    dev and local parts dropped: a build of 0.33.1rc1+cu130 reads where 0.33.1 does.

    Raises:
        ValueError: not such a version (one line).
    """
    try:
        parsed = Version(version.strip())
    except InvalidVersion:
        parsed = None
    if parsed is None or parsed.epoch:
        raise ValueError(f"engine version {version[:40]!r} is not a release number like 0.5.23")
    post = f".post{parsed.post}" if parsed.post is not None else ""
    return Version(".".join(map(str, parsed.release)) + post)


def engine_version(engine: str, version: str | None) -> str:
    """`version` checked, or the engine's default (`DEFAULT_ENGINE_VERSIONS`) when None.

    Raises:
        ValueError: an unknown engine, or a version `version_key` refuses.
    """
    if engine not in DEFAULT_ENGINE_VERSIONS:
        raise ValueError(f"engine {engine!r} is not one of {', '.join(DEFAULT_ENGINE_VERSIONS)}")
    if version is None:
        return DEFAULT_ENGINE_VERSIONS[engine]
    version_key(version)
    return version.strip()


def unchecked_line(engine: str, version: str) -> str | None:
    """A line saying that `version` of `engine` is outside the releases whose sources were
    read (`CHECKED_RELEASES`), so its folders are assumed; None for a checked release."""
    first, last = CHECKED_RELEASES[engine]
    if version_key(first) <= version_key(version) <= version_key(last):
        return None
    span = first if first == last else f"{first} to {last}"
    return (
        f"note: {engine} {version} was never checked (only {span}): its folders are assumed "
        f"to be those of the nearest checked release; look in the image if files are not read"
    )


def engine_folder(engine: str, family: str, version: str | None = None) -> EngineFolder:
    """The row of `family_rows` that a release of `engine` reads `family`'s files by.

    Args:
        engine: "vllm" or "sglang".
        family: a registered family's name.
        version: the engine's release; None for `DEFAULT_ENGINE_VERSIONS`.

    Raises:
        ValueError: an unknown engine or family, or a bad version.
    """
    key = version_key(engine_version(engine, version))
    rows = [row for row in family_rows(engine, family) if version_key(row.first_version) <= key]
    if not rows:
        raise ValueError(f"{engine} has no folder for {family!r} files")
    return rows[-1]  # oldest first


def triton_folder(triton_version: str) -> str:
    """SGLang's folder name for a Triton release: "3.8.0" -> "triton_3_8_0".

    SGLang 0.5.23's get_moe_configs looks in `triton_{triton.__version__.replace('.', '_')}`
    first, then in every `triton_*` folder beside it, newest first, parsing each name's parts as
    integers: a local version ("3.8.0+git...") would not parse, so only X.Y.Z is taken.

    Raises:
        ValueError: not a version like 3.8.0.
    """
    if not _TRITON_RE.fullmatch(triton_version):
        raise ValueError(
            f"Triton version {triton_version[:40]!r} is not like 3.8.0 (the serving "
            'image\'s: python3 -c "import triton; print(triton.__version__)")'
        )
    return f"triton_{triton_version.replace('.', '_')}"


def folder_for(
    engine: str, family: str, version: str | None = None, triton_version: str | None = None
) -> str:
    """The folder, relative to site-packages, that a release reads `family`'s files from.

    Args:
        engine: "vllm" or "sglang".
        family: a registered family's name.
        version: the engine's release; None for `DEFAULT_ENGINE_VERSIONS`.
        triton_version: the serving image's Triton, e.g. "3.8.0" (SGLang's MoE folder depends
            on it); unused elsewhere.

    Raises:
        ValueError: as `engine_folder`; or the folder depends on Triton and `triton_version` is
            None or not like 3.8.0.
    """
    folder = engine_folder(engine, family, version).folder
    if TRITON_PLACEHOLDER not in folder:
        return folder
    if triton_version is None:
        raise ValueError(
            f"{engine} reads fused-MoE files from a folder per Triton version "
            f"({folder.replace(TRITON_PLACEHOLDER, 'triton_<X_Y_Z>')}): give the "
            "serving image's Triton (--triton-version, e.g. 3.8.0)"
        )
    return folder.replace(TRITON_PLACEHOLDER, triton_folder(triton_version))
