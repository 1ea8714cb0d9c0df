"""Where each release of vLLM and SGLang reads block-FP8 config files, and which entries SGLang
rewrites when it reads them (pure).

Each kernel family lists where the engines read its files (`FamilyFiles.engine_folders`, rows of
engine, first version and folder under site-packages). A release reads from the row of its engine
with the highest first version not above its own, so the next move of a folder is one more row.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from packaging.version import InvalidVersion, Version

from tuner.kernels.engines import TRITON_PLACEHOLDER, EngineFolder
from tuner.kernels.registry import FAMILIES, family_of_file
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


def folder_history(engine: str, family: str) -> list[str]:
    """The rows of one engine and family as lines, oldest first: "0.5.21 and later:
    sglang/kernels/ops/gemm/configs", "before 0.5.16: sglang/srt/layers/quantization/configs".
    """
    rows = family_rows(engine, family)
    lines = []
    for row, after in zip(rows, [*(r.first_version for r in rows[1:]), None], strict=True):
        if row.first_version == "0":
            span = f"before {after}" if after else "every release"
        else:
            span = (
                f"{row.first_version} to before {after}"
                if after
                else f"{row.first_version} and later"
            )
        lines.append(f"{span}: {row.folder.replace(TRITON_PLACEHOLDER, 'triton_<X_Y_Z>')}")
    return lines


# SGLang's loader raises BLOCK_SIZE_K to block_k as it reads a dense file (with a warning:
# "Clamped BLOCK_SIZE_K up to ..."), by release, found in the wheels' get_w8a8_block_fp8_configs:
# none up to 0.5.11; every entry with BLOCK_SIZE_K < block_k in 0.5.12 and 0.5.13; from 0.5.14
# to 0.5.23 only where `not _is_cuda or block_k % BLOCK_SIZE_K != 0` (`_is_cuda`: torch has
# CUDA, sglang/srt/utils/common.py is_cuda). 0.5.13.post1 was not checked (taken as 0.5.13).
_CLAMP_ALWAYS = "0.5.12"
_CLAMP_UNLESS_CUDA_DIVIDES = "0.5.14"


def sglang_clamped(
    configs: Mapping[int, Mapping[str, int]],
    block_k: int,
    device_name: str,
    version: str | None = None,
) -> list[tuple[int, int]]:
    """The entries a release of SGLang rewrites as it reads a dense file: (M, BLOCK_SIZE_K in
    the file) for each, in the file's order; it runs them with BLOCK_SIZE_K = block_k.

    Args:
        configs: the file's entries, M -> config with "BLOCK_SIZE_K".
        block_k: the file's block_shape[1].
        device_name: the device key (AMD and Intel keys are not CUDA).
        version: SGLang's release; None for `DEFAULT_ENGINE_VERSIONS["sglang"]`.

    Raises:
        ValueError: a bad version.
    """
    key = version_key(engine_version("sglang", version))
    if key < version_key(_CLAMP_ALWAYS):
        return []
    conditional = key >= version_key(_CLAMP_UNLESS_CUDA_DIVIDES)
    cuda = not device_name.startswith(("AMD_", "Intel(R)_"))  # ROCm and XPU keys
    clamped = []
    for M, entry in configs.items():
        block = entry["BLOCK_SIZE_K"]
        if block < block_k and (not conditional or not cuda or block_k % block != 0):
            clamped.append((M, block))
    return clamped


def sglang_clamp_lines(
    files: Iterable[tuple[str, Mapping[int, Mapping[str, int]]]],
    device_name: str,
    version: str | None = None,
) -> list[str]:
    """One line for each dense file SGLang would rewrite on read (`sglang_clamped`), in order.

    Args:
        files: (file name in either spelling, its entries in the file's order); files of a
            family SGLang reads as they are (not `FamilyFiles.sglang_clamps_block_k`, e.g.
            fused-MoE: get_moe_configs rewrites nothing) and files without a block shape are
            skipped.
        device_name: the device key the files are for.
        version: SGLang's release; None for `DEFAULT_ENGINE_VERSIONS["sglang"]`.

    Raises:
        ValueError: a bad version, or a name no family parses (`family_of_file`).
    """
    lines = []
    for file_name, configs in files:
        family = family_of_file(file_name)
        if not family.files.sglang_clamps_block_k:
            continue
        block_shape = family.files.parse_file_name(file_name)[0].block_shape
        if block_shape is None:  # no group_k to raise BLOCK_SIZE_K to
            continue
        block_k = block_shape[1]
        clamped = sglang_clamped(configs, block_k, device_name, version)
        if clamped:
            entries = ", ".join(f"M={M} (BLOCK_SIZE_K {block})" for M, block in clamped)
            lines.append(
                f"SGLang {engine_version('sglang', version)} rewrites {file_name} as it reads "
                f"it: BLOCK_SIZE_K raised to {block_k} at {entries}; it runs those entries, not "
                "the file's"
            )
    return lines
