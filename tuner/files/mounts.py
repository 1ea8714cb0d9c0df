"""Ready-to-paste read-only mounts of config files into a serving container (pure text).

Each release reads a family's files where `FamilyFiles.engine_folders` says (vLLM 0.33.0:
dense files only from `<site-packages>/vllm/model_executor/layers/quantization/utils/configs/`,
`VLLM_TUNED_CONFIG_FOLDER` does not apply to them; SGLang 0.5.23:
`<site-packages>/sglang/kernels/ops/gemm/configs/`). Each file is mounted on its own, so the
files the engine ships stay visible.

Fused-MoE files (`E=...,N=...`) are read by vLLM 0.33.0's `get_moe_configs` from
`VLLM_TUNED_CONFIG_FOLDER` first, then from its package's `fused_moe/configs/`: they go in one
read-only folder mount at `MOE_CONTAINER_DIR` with that variable set to it (docker `-e`, compose
`environment:`, Kubernetes `env:`). SGLang reads them from a folder per Triton version,
`.../configs/triton_<X_Y_Z>/` (`tuner.files.engine_folders.folder_for`): they are mounted there
file by file, as dense files are.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

from tuner.files.engine_folders import engine_version, folder_for
from tuner.files.mount_formats import DOCKER_HEAD as DOCKER_HEAD  # re-exported
from tuner.files.mount_formats import MOE_CONTAINER_DIR as MOE_CONTAINER_DIR  # re-exported
from tuner.files.mount_formats import MOE_ENV as MOE_ENV  # re-exported
from tuner.files.mount_formats import (
    FileMount,
    MoeFile,
    compose_body,
    configmap_key,
    docker_body,
    folder_envs,
    k8s_body,
)
from tuner.inputs.backends import device_advice
from tuner.kernels.engines import ENGINES, SGLANG_NOTE
from tuner.kernels.registry import DEFAULT_FAMILY, family_of_file
from tuner.kernels.vllm_table import TRITON_FLAG

FORMATS: tuple[str, ...] = ("docker", "compose", "k8s")
# Where the engine's package lives in its usual image: vLLM's vllm/vllm-openai image installs
# into Python 3.12's dist-packages (as the README's example); SGLang's lmsysorg/sglang image runs
# an editable checkout, /sgl-workspace/sglang/python (the path its own warnings print).
DEFAULT_SITE_PACKAGES: dict[str, str] = {
    "vllm": "/usr/local/lib/python3.12/dist-packages",
    "sglang": "/sgl-workspace/sglang/python",
}
DEFAULT_HOST_DIR = "$PWD/configs"
# Prints the container's site-packages folder for the engine.
_FIND_SITE = 'python3 -c "import os, {0}; print(os.path.dirname(os.path.dirname({0}.__file__)))"'
# Prints the engine's release in the container.
_FIND_VERSION = 'python3 -c "import {0}; print({0}.__version__)"'
_SITE_RE = re.compile(r"/[^\x00\n\r\"'`$\\]{0,511}")


@dataclass(frozen=True)
class MountRequest:
    """What to mount and where.

    Attributes:
        device_name: vLLM's device key the files are for.
        engine: "vllm" or "sglang".
        file_names: the files' names on the host (either spelling).
        host_dir: the host folder that holds them ("$PWD/..." is left for the shell to expand).
        site_packages: the engine's site-packages folder in the container (absolute).
        fmt: one of `FORMATS`.
        compute_capability: the device's, e.g. "8.9", when known (marks its architecture in
            the note on which kernel vLLM runs); None otherwise.
        tuned_with: what the winners were timed with (`tuner.files.archive.versions_line`),
            printed in the header; "" leaves the line out (files from a folder).
        engine_version: the engine's release, which decides its folders
            (`tuner.files.engine_folders`); None for the newest release checked (vLLM 0.33.0,
            SGLang 0.5.23).
        triton_version: the serving image's Triton, e.g. "3.8.0": SGLang reads fused-MoE files
            from `configs/triton_3_8_0/`; None when there are none (or for vLLM).
        triton_from: how `triton_version` was chosen, said in the header (e.g. "the one the
            files were tuned with").
    """

    device_name: str
    engine: str
    file_names: tuple[str, ...]
    host_dir: str
    site_packages: str
    fmt: str
    compute_capability: str | None = None
    tuned_with: str = ""
    engine_version: str | None = None
    triton_version: str | None = None
    triton_from: str = "given"


def check_site_packages(path: str) -> str:
    """An absolute container path, without quotes, `$`, backslashes or a trailing slash.

    Args:
        path: the engine's site-packages folder in the container.

    Returns:
        The path without a trailing slash.

    Raises:
        ValueError: the path is relative or has characters that would need quoting.
    """
    if not _SITE_RE.fullmatch(path) or "/../" in f"{path}/":
        raise ValueError(
            f"--site-packages must be an absolute path without quotes, '$', "
            f"'\\\\' or '..', got {path[:80]!r}"
        )
    return path.rstrip("/") or "/"


def render_mounts(request: MountRequest) -> str:
    """The mounts of every file, as text to paste into a command line, compose file or pod spec.

    Args:
        request: the files, engine and its release, folders and format.

    Returns:
        Commented text ending in a newline; each dense file mounted read-only under the
        engine's name in the folder its release reads; fused-MoE files in one read-only folder
        mount with VLLM_TUNED_CONFIG_FOLDER set to it (vLLM), or each in SGLang's folder for the
        serving image's Triton (SGLang).

    Raises:
        ValueError: an unknown engine or format, a bad site-packages path or engine version,
            no files, a file name that is not a config file name, or SGLang MoE files without
            a Triton version.
    """
    if request.engine not in ENGINES:
        raise ValueError(f"engine {request.engine!r} is not one of {', '.join(ENGINES)}")
    if request.fmt not in FORMATS:
        raise ValueError(f"format {request.fmt!r} is not one of {', '.join(FORMATS)}")
    if not request.file_names:
        raise ValueError(f"no config files for {request.device_name} to mount")
    site = check_site_packages(request.site_packages)
    release = engine_version(request.engine, request.engine_version)
    target_dir = f"{site}/{folder_for(request.engine, DEFAULT_FAMILY, release)}"
    host_dir = request.host_dir.rstrip("/") or "/"
    files, moe, moe_dir = _placed(request, site, release, target_dir)
    head = _mounts_head(request, release, target_dir, len(files))
    if moe:
        head += [
            f"# {len(moe)} fused-MoE file(s) (E=...): one read-only folder mount of "
            f"{host_dir}/ at {MOE_CONTAINER_DIR}/,",
            f"# with {' and '.join(f'{env}={MOE_CONTAINER_DIR}' for env in folder_envs(moe))} "
            "(vLLM reads MoE files there first).",
        ]
    if moe_dir is not None:
        head += _sglang_moe_head(request, moe_dir)
    capabilities = [request.compute_capability or ""]
    head += advice_comments(request.device_name, capabilities, request.engine)
    flag = needs_flag(
        request.device_name, capabilities, request.engine, [file.dst for file in files]
    )
    if not files and not moe:
        raise ValueError(
            f"no config files for {request.device_name} to mount with {request.engine}"
        )
    if request.fmt == "docker":
        body = docker_body(files, moe, host_dir)
    elif request.fmt == "compose":
        body = compose_body(files, moe, host_dir)
    else:
        body = k8s_body(request.device_name, files, moe, host_dir)
    return "\n".join(head + body + (flag_lines(request.fmt) if flag else [])) + "\n"


def _placed(
    request: MountRequest, site: str, release: str, target_dir: str
) -> tuple[list[FileMount], list[MoeFile], str | None]:
    """Where each file goes, by name: the mounts of single files (dense ones in `target_dir`,
    SGLang's MoE ones in its folder for the Triton version), vLLM's MoE files (one folder
    mount), and SGLang's MoE folder (None without MoE files)."""
    files, moe = [], []
    moe_dir = None
    for name in sorted(request.file_names):
        family = family_of_file(name)
        key = configmap_key(family.files.parse_file_name(name)[0])
        if family.files.tuned_folder_env and request.engine == "vllm":
            moe.append(MoeFile(name, key, family.files.tuned_folder_env))
            continue
        folder = target_dir
        if family.files.tuned_folder_env:
            moe_folder = folder_for(request.engine, family.name, release, request.triton_version)
            moe_dir = folder = f"{site}/{moe_folder}"
        dst = family.respell(name, request.engine, request.device_name)
        files.append(FileMount(name, f"{folder}/{dst}", key, dst))
    return files, moe, moe_dir


def _mounts_head(request: MountRequest, release: str, target_dir: str, count: int) -> list[str]:
    """The first comment lines: the mounts, the engine's dense folder and how to find the
    image's own, the restart, and what the winners were tuned with."""
    engine_label = f"{request.engine} {release}"
    head = [
        f"# {count} read-only mount(s) of W8A8 block-FP8 configs for {request.device_name} "
        f"({engine_label}).",
        f"# {engine_label} reads dense files only from {target_dir}/",
        f"# (site-packages in your image: {_FIND_SITE.format(request.engine)};",
        "# another release reads elsewhere: --engine-version, from "
        f"{_FIND_VERSION.format(request.engine)})",
        "# Files are read once per process: restart the server after changing them.",
    ]
    if request.tuned_with:
        head.append(f"# Tuned with {request.tuned_with}.")
    return head


def _sglang_moe_head(request: MountRequest, moe_dir: str) -> list[str]:
    """SGLang's MoE files: the folder for the serving image's Triton, and why it must match."""
    return [
        f"# Fused-MoE files (E=...) from {moe_dir}/, written by "
        '`tuner export --engine sglang` (no "triton_version" key: SGLang cannot '
        "read one);",
        f"# SGLang's folder for Triton {request.triton_version} ({request.triton_from}; "
        "it must be the serving image's, else SGLang falls back to another Triton's "
        "folder or its default config).",
    ]


def advice_comments(device_name: str, capabilities: Sequence[str], engine: str) -> list[str]:
    """The device's advice as comment lines, the one text every form that hands out files
    prints (`tuner mounts` in each format, the pull recipes, GET /devices/{d}/mounts): for
    vLLM, `tuner.inputs.backends.device_advice`'s lines (which kernel vLLM 0.33.0 runs there by
    default and what makes it read the files), wrapped at 96 columns with `TRITON_FLAG` kept
    on one line; for SGLang, its note on the kernel the files were tuned on.

    Args:
        device_name: vLLM's device key, e.g. "NVIDIA_L20".
        capabilities: its compute capabilities from the store or a release, newest first
            ("8.9"; "" where unknown); none known: the table of known GPUs decides.
        engine: "vllm" or "sglang".

    Returns:
        Lines starting "# ", without newlines.
    """
    if engine != "vllm":
        return [f"# {SGLANG_NOTE}"]
    held = TRITON_FLAG.replace(" ", "\0")
    return [
        f"# {part.replace(chr(0), ' ')}"
        for line in device_advice(device_name, capabilities).lines()
        for part in textwrap.wrap(line.replace(TRITON_FLAG, held), width=94, break_on_hyphens=False)
    ]


def needs_flag(
    device_name: str, capabilities: Sequence[str], engine: str, file_names: Sequence[str]
) -> bool:
    """True when the files are read only with `TRITON_FLAG`: vLLM, a device where Triton is not
    the default dense kernel (`tuner.inputs.backends.DeviceAdvice.needs_flag`: every CUDA GPU,
    not the interpreter) and at least one dense file (fused-MoE files, `E=...`, are read
    whatever the linear backend).

    Args:
        device_name, capabilities, engine: as `advice_comments` takes them.
        file_names: the files handed out, in either spelling.
    """
    return (
        engine == "vllm"
        and device_advice(device_name, capabilities).needs_flag
        and any(not name.startswith("E=") for name in file_names)
    )


def flag_lines(fmt: str) -> list[str]:
    """The server argument that makes vLLM run the Triton kernel, and so read the dense files
    (`needs_flag`), in the format's own syntax, added to the user's arguments, never replacing
    them: after the image name (docker); as two items to append to the serving service's
    `command:` list or the serving container's `args:` list, shown commented so that the
    printed YAML stays a mounts snippet whose every line can be pasted (a bare `command:` or
    `args:` key would replace `--model ...` and the rest).

    Args:
        fmt: one of `FORMATS`, or "compose-pull" / "k8s-pull" (`tuner.files.pull`).

    Returns:
        The lines, compose's indented for the serving service.
    """
    name, value = TRITON_FLAG.split()
    if fmt == "docker":
        return [
            "# After the image name, with the server's other arguments (vLLM reads the "
            "files only with it):",
            f"  {TRITON_FLAG}",
        ]
    if fmt.startswith("compose"):
        return [
            f"    # vLLM reads the files only with {TRITON_FLAG}: add these two items to "
            "the end of",
            "    # this service's existing command: list, after --model and your other arguments",
            f'    # (a command written as one string: add " {TRITON_FLAG}" to its end):',
            f"    #   - {name}",
            f"    #   - {value}",
        ]
    return [
        f"# vLLM reads the files only with {TRITON_FLAG}: add these two items to the end of the",
        "# serving container's existing args: list, after --model and your other arguments:",
        f"#   - {name}",
        f"#   - {value}",
    ]


def config_files_in(
    folder_names: Sequence[str], device_name: str, engine: str = "vllm"
) -> list[str]:
    """The names among a folder's entries that are config files of one device, each under the
    device part `engine` reads: for vLLM the family's (`FamilyFiles.file_device`: its fused-MoE
    names fold every H200 into NVIDIA_H200, vLLM 0.33.0 fused_moe.get_config_file_name), for
    SGLang the device key itself (SGLang 0.5.23 names MoE files by the device as torch names it;
    `tuner export --engine sglang` writes them so).

    Args:
        folder_names: file names in the folder.
        device_name: vLLM's device key.
        engine: "vllm" or "sglang".

    Returns:
        The matching names, sorted.
    """
    found = []
    for name in folder_names:
        try:
            family = family_of_file(name)
        except ValueError:
            continue
        wanted = family.files.file_device(device_name) if engine == "vllm" else device_name
        if family.files.parse_file_name(name)[1] == wanted:
            found.append(name)
    return sorted(found)
