"""Where each release of vLLM and SGLang reads block-FP8 config files (pure).

Each kernel family lists where the engines read its files (`FamilyFiles.engine_folders`, rows of
engine, first version and folder under site-packages). A release reads from the row of its engine
with the highest first version not above its own, so the next move of a folder is one more row;
the files are handed out for the newest release checked (`DEFAULT_ENGINE_VERSIONS`).
"""

from __future__ import annotations

import re

from packaging.version import Version

from tuner.kernels.engines import TRITON_PLACEHOLDER, EngineFolder
from tuner.kernels.registry import FAMILIES
from tuner.kernels.vllm_table import VLLM_VERSION

# The newest release whose sources the families' rows were checked in (the families' comments
# beside their rows say which): mounts, recipes and the archive's README are for it.
DEFAULT_ENGINE_VERSIONS: dict[str, str] = {"vllm": VLLM_VERSION, "sglang": "0.5.23"}
_TRITON_RE = re.compile(r"[0-9]{1,4}\.[0-9]{1,4}\.[0-9]{1,4}")


def engine_folder(engine: str, family: str, version: str | None = None) -> EngineFolder:
    """The row of a registered family's `engine_folders` that a release of `engine` reads
    `family`'s files by: the engine's row with the highest first version not above `version`
    (None: `DEFAULT_ENGINE_VERSIONS`).

    Raises:
        ValueError: an unknown engine, or no row for the family.
    """
    if engine not in DEFAULT_ENGINE_VERSIONS:
        raise ValueError(f"engine {engine!r} is not one of {', '.join(DEFAULT_ENGINE_VERSIONS)}")
    release = Version(version or DEFAULT_ENGINE_VERSIONS[engine])
    registered = FAMILIES.get(family)
    rows = [
        row
        for row in (registered.files.engine_folders if registered is not None else ())
        if row.engine == engine and Version(row.first_version) <= release
    ]
    if not rows:
        raise ValueError(f"{engine} has no folder for {family!r} files")
    return max(rows, key=lambda row: Version(row.first_version))


def triton_folder(triton_version: str) -> str:
    """SGLang's folder name for a Triton release: "3.8.0" -> "triton_3_8_0".

    SGLang 0.5.23's get_moe_configs looks in `triton_{triton.__version__.replace('.', '_')}`
    first, then in every `triton_*` folder beside it, newest first, parsing each name's parts as
    integers: a local version ("3.8.0+git...") would not parse, so only X.Y.Z is taken.

    Raises:
        ValueError: not a version like 3.8.0.
    """
    if not _TRITON_RE.fullmatch(triton_version):
        raise ValueError(f"Triton version {triton_version[:40]!r} is not like 3.8.0")
    return f"triton_{triton_version.replace('.', '_')}"


def folder_for(
    engine: str, family: str, version: str | None = None, triton_version: str | None = None
) -> str:
    """The folder, relative to site-packages, that a release reads `family`'s files from.

    Args:
        engine: "vllm" or "sglang".
        family: a registered family's name.
        version: the engine's release; None for `DEFAULT_ENGINE_VERSIONS`.
        triton_version: the Triton the files were tuned with, e.g. "3.8.0" (SGLang's MoE
            folder depends on it); unused elsewhere.

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
            f"({folder.replace(TRITON_PLACEHOLDER, 'triton_<X_Y_Z>')}), and the files' winners "
            "were timed with several Tritons or none recorded"
        )
    return folder.replace(TRITON_PLACEHOLDER, triton_folder(triton_version))
