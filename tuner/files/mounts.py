"""Ready-to-paste read-only mounts of config files into a serving container (pure text).

vLLM 0.33.0 reads these files only from `<site-packages>/vllm/model_executor/layers/quantization/
utils/configs/` (DESIGN §9; `VLLM_TUNED_CONFIG_FOLDER` does not apply); SGLang only from the
`configs/` folder beside its fp8_kernel.py, `<site-packages>/sglang/srt/layers/quantization/
configs/`. Each file is mounted on its own, so the files the engine ships stay visible.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from tuner.inputs.backends import backend_lines
from tuner.kernels.dense.naming import (
    ENGINE_CONFIG_DIRS,
    SGLANG_NOTE,
    engine_file_name,
    parse_config_file_name,
)

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
_FIND_SITE = "python3 -c \"import os, {0}; print(os.path.dirname(os.path.dirname({0}.__file__)))\""
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
    """

    device_name: str
    engine: str
    file_names: tuple[str, ...]
    host_dir: str
    site_packages: str
    fmt: str
    compute_capability: str | None = None


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
        raise ValueError(f"--site-packages must be an absolute path without quotes, '$', "
                         f"'\\\\' or '..', got {path[:80]!r}")
    return path.rstrip("/") or "/"


def _double_quoted(text: str, pwd_at: int = 0) -> str:
    """A shell double-quoted word; a $PWD at `pwd_at` (where the host folder starts) stays
    expandable, every other `\\`, `"`, backquote and `$` is escaped."""
    keep = "$PWD" if text.startswith("$PWD", pwd_at) else ""
    head, rest = text[:pwd_at], text[pwd_at + len(keep):]
    escaped = [re.sub(r'([\\"`$])', r"\\\1", part) for part in (head, rest)]
    return f'"{escaped[0]}{keep}{escaped[1]}"'


def _docker_mount(source: str, target: str) -> str:
    """One `docker run` flag mounting `source` read-only at `target`.

    `-v src:dst:ro` when neither path has a ':' (the separator of -v); otherwise `--mount`,
    whose value docker reads as CSV: the source and target fields are quoted and their '"'
    doubled, because the file names hold ','. Device names may hold ':' (vLLM keeps every
    character but the space).
    """
    if ":" not in source and ":" not in target:
        return f"-v {_double_quoted(f'{source}:{target}:ro')}"
    field = 'type=bind,"source='
    value = (f'{field}{source.replace(chr(34), chr(34) * 2)}",'
             f'"target={target.replace(chr(34), chr(34) * 2)}",readonly')
    return f"--mount {_double_quoted(value, pwd_at=len(field))}"


def _yaml(text: str) -> str:
    # A JSON string is a valid YAML double-quoted scalar: '[', ',' and '=' stay literal.
    return json.dumps(text)


def _configmap_name(device_name: str) -> str:
    """A ConfigMap name for a device: a DNS-1123 label (lowercase letters, digits and '-', first
    and last alphanumeric, at most 63 characters), so valid as any Kubernetes object name.

    A plain name (letters and digits joined by single '_' or '-', e.g. NVIDIA_L20) gives
    `blockfp8-nvidia-l20`; any other (e.g. `Intel(R)_Data_Center_GPU_Max_1550`), or one too
    long, is cut down and gets the first 8 hex digits of its sha256, so that two such devices
    do not share a ConfigMap.
    """
    slug = re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-")
    name = f"blockfp8-{slug}".rstrip("-")
    if re.fullmatch(r"[A-Za-z0-9]+(?:[_-][A-Za-z0-9]+)*", device_name) and len(name) <= 63:
        return name
    digest = hashlib.sha256(device_name.encode("utf-8")).hexdigest()[:8]
    return f"{name[:54].rstrip('-')}-{digest}"


def _configmap_key(N: int, K: int, block_shape: tuple[int, int]) -> str:
    # ConfigMap keys allow only [-._a-zA-Z0-9]; vLLM's names have '=', ',' and '['.
    return f"n{N}-k{K}-b{block_shape[0]}x{block_shape[1]}.json"


def render_mounts(request: MountRequest) -> str:
    """The mounts of every file, as text to paste into a command line, compose file or pod spec.

    Args:
        request: the files, engine, folders and format.

    Returns:
        Commented text ending in a newline; each file mounted read-only under the engine's name.

    Raises:
        ValueError: an unknown engine or format, a bad site-packages path, no files, or a file
            name that is not a config file name.
    """
    if request.engine not in ENGINE_CONFIG_DIRS:
        raise ValueError(f"engine {request.engine!r} is not one of {', '.join(ENGINE_CONFIG_DIRS)}")
    if request.fmt not in FORMATS:
        raise ValueError(f"format {request.fmt!r} is not one of {', '.join(FORMATS)}")
    if not request.file_names:
        raise ValueError(f"no config files for {request.device_name} to mount")
    site = check_site_packages(request.site_packages)
    target_dir = f"{site}/{ENGINE_CONFIG_DIRS[request.engine]}"
    host_dir = request.host_dir.rstrip("/") or "/"
    files = []
    for name in sorted(request.file_names):
        parsed = parse_config_file_name(name)
        files.append((name, engine_file_name(name, request.engine), parsed))
    head = [
        f"# {len(files)} read-only mount(s) of W8A8 block-FP8 configs for {request.device_name} "
        f"({request.engine}).",
        f"# The engine reads them only from {target_dir}/",
        f"# (site-packages in your image: {_FIND_SITE.format(request.engine)})",
        "# Files are read once per process: restart the server after changing them.",
    ]
    if request.engine == "vllm":
        head += [f"# {line}" for line in backend_lines(request.compute_capability)[:-1]]
    else:
        head.append(f"# {SGLANG_NOTE}")
    body: list[str] = []
    if request.fmt == "docker":
        body.append("# Add to `docker run`:")
        body += [f"  {_docker_mount(f'{host_dir}/{src}', f'{target_dir}/{dst}')} \\"
                 for src, dst, _ in files]
    elif request.fmt == "compose":
        body += ["# Under the serving service of docker-compose.yml:", "    volumes:"]
        for src, dst, _ in files:
            body += ["      - type: bind", f"        source: {_yaml(f'{host_dir}/{src}')}",
                     f"        target: {_yaml(f'{target_dir}/{dst}')}", "        read_only: true"]
    else:
        cm = _configmap_name(request.device_name)
        body.append("# Make the ConfigMap from the host files:")
        body.append(f"#   kubectl create configmap {cm} \\")
        body += [f"#     --from-file={_configmap_key(p.N, p.K, p.block_shape)}="
                 f"{_double_quoted(f'{host_dir}/{src}')} \\" for src, _, p in files]
        body += ["#     --dry-run=client -o yaml | kubectl apply -f -",
                 "# In the pod spec:", "volumes:", "  - name: blockfp8-configs", "    configMap:",
                 f"      name: {cm}", "      items:"]
        for _, dst, p in files:
            body += [f"        - key: {_configmap_key(p.N, p.K, p.block_shape)}",
                     f"          path: {_yaml(dst)}"]
        body += ["# In the serving container:", "volumeMounts:"]
        for _, dst, _p in files:
            body += ["  - name: blockfp8-configs", f"    mountPath: {_yaml(f'{target_dir}/{dst}')}",
                     f"    subPath: {_yaml(dst)}", "    readOnly: true"]
    return "\n".join(head + body) + "\n"


def config_files_in(folder_names: Sequence[str], device_name: str) -> list[str]:
    """The names among a folder's entries that are config files of one device.

    Args:
        folder_names: file names in the folder.
        device_name: vLLM's device key.

    Returns:
        The matching names, sorted.
    """
    found = []
    for name in folder_names:
        try:
            parsed = parse_config_file_name(name)
        except ValueError:
            continue
        if parsed.device_name == device_name:
            found.append(name)
    return sorted(found)
