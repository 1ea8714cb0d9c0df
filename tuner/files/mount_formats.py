"""The text of `tuner.files.mounts`' recipes in each format (docker flags, a compose service's
volumes, Kubernetes ConfigMaps and mounts), with the quoting each needs."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from typing import NamedTuple

from tuner.kernels.shape import PER_TENSOR, Shape

# Where the MoE files' folder is mounted in the container; vLLM is told by VLLM_TUNED_CONFIG_FOLDER.
MOE_CONTAINER_DIR = "/opt/blockfp8-tuner/moe-configs"
MOE_ENV = "VLLM_TUNED_CONFIG_FOLDER"


class FileMount(NamedTuple):
    """A file mounted on its own: its name on the host, where it goes in the container, its
    ConfigMap key, and its name there (the engine's spelling)."""

    src: str
    target: str
    key: str
    dst: str


class MoeFile(NamedTuple):
    """A file vLLM reads from the folder a variable names (`FamilyFiles.tuned_folder_env`,
    e.g. fused-MoE's), from the one folder mount: its name, ConfigMap key and variable."""

    src: str
    key: str
    env: str = MOE_ENV


def folder_envs(moe: Sequence[MoeFile]) -> list[str]:
    """The variables to set to the one folder mount, in the order the files first name them."""
    return list(dict.fromkeys(file.env for file in moe))


def _double_quoted(text: str, pwd_at: int = 0) -> str:
    """A shell double-quoted word; a $PWD at `pwd_at` (where the host folder starts) stays
    expandable, every other `\\`, `"`, backquote and `$` is escaped."""
    keep = "$PWD" if text.startswith("$PWD", pwd_at) else ""
    head, rest = text[:pwd_at], text[pwd_at + len(keep) :]
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
    value = (
        f'{field}{source.replace(chr(34), chr(34) * 2)}",'
        f'"target={target.replace(chr(34), chr(34) * 2)}",readonly'
    )
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


def configmap_key(shape: Shape) -> str:
    """A file's key in a ConfigMap, from the shape its name gives: `n5120-k3072-b128x128.json`,
    `e128-n384-b128x128.json` (a fused-MoE name holds no K: its shape's K is 0),
    `n512-k256-per-tensor.json` (a shape without block scales)."""
    # ConfigMap keys allow only [-._a-zA-Z0-9]; vLLM's names have '=', ',' and '['.
    params = "".join(f"{name.lower()}{value}-" for name, value in shape.params)
    k = f"-k{shape.K}" if shape.K else ""
    block = shape.block_shape
    blocks = PER_TENSOR if block is None else f"b{block[0]}x{block[1]}"
    return f"{params}n{shape.N}{k}-{blocks}.json"


# Every line continues the command: the block goes into a multi-line `docker run`.
DOCKER_HEAD = "# Insert in `docker run`, before the image name's line (each line ends in \\):"


def docker_body(files: Sequence[FileMount], moe: Sequence[MoeFile], host_dir: str) -> list[str]:
    """`docker run` flags: one per file, then the MoE folder and its variable."""
    flags = [_docker_mount(f"{host_dir}/{src}", target) for src, target, _, _ in files]
    if moe:
        flags.append(_docker_mount(host_dir, MOE_CONTAINER_DIR))
        flags += [f"-e {env}={MOE_CONTAINER_DIR}" for env in folder_envs(moe)]
    return [DOCKER_HEAD] + [f"  {flag} \\" for flag in flags]


def compose_body(files: Sequence[FileMount], moe: Sequence[MoeFile], host_dir: str) -> list[str]:
    """The serving service's bind mounts: one per file, then the MoE folder and its variable."""
    body = ["# Under the serving service of docker-compose.yml:", "    volumes:"]
    mounts = [(f"{host_dir}/{src}", target) for src, target, _, _ in files]
    mounts += [(host_dir, MOE_CONTAINER_DIR)] if moe else []
    for source, target in mounts:
        body += [
            "      - type: bind",
            f"        source: {_yaml(source)}",
            f"        target: {_yaml(target)}",
            "        read_only: true",
        ]
    if moe:
        body.append("    environment:")
        body += [f"      {env}: {_yaml(MOE_CONTAINER_DIR)}" for env in folder_envs(moe)]
    return body


def k8s_body(
    device_name: str, files: Sequence[FileMount], moe: Sequence[MoeFile], host_dir: str
) -> list[str]:
    """The ConfigMaps to make from the host files, the pod's volumes, and the serving
    container's mounts (one subPath per file) and env."""
    cm = _configmap_name(device_name)
    body = []
    if files:
        body.append("# Make the ConfigMap from the host files:")
        body.append(f"#   kubectl create configmap {cm} \\")
        body += [
            f"#     --from-file={key}={_double_quoted(f'{host_dir}/{src}')} \\"
            for src, _, key, _ in files
        ]
        body.append("#     --dry-run=client -o yaml | kubectl apply -f -")
    if moe:
        body += [
            "# Make the fused-MoE ConfigMap from the host files:",
            f"#   kubectl create configmap {cm}-moe \\",
        ]
        body += [
            f"#     --from-file={key}={_double_quoted(f'{host_dir}/{src}')} \\"
            for src, key, _ in moe
        ]
        body.append("#     --dry-run=client -o yaml | kubectl apply -f -")
    body += ["# In the pod spec:", "volumes:"]
    if files:
        body += [
            "  - name: blockfp8-configs",
            "    configMap:",
            f"      name: {cm}",
            "      items:",
        ]
        for _, _, key, dst in files:
            body += [f"        - key: {key}", f"          path: {_yaml(dst)}"]
    if moe:
        body += [
            "  - name: blockfp8-moe-configs",
            "    configMap:",
            f"      name: {cm}-moe",
            "      items:",
        ]
        for src, key, _ in moe:
            body += [f"        - key: {key}", f"          path: {_yaml(src)}"]
    body += ["# In the serving container:", "volumeMounts:"]
    for _, target, _key, dst in files:
        body += [
            "  - name: blockfp8-configs",
            f"    mountPath: {_yaml(target)}",
            f"    subPath: {_yaml(dst)}",
            "    readOnly: true",
        ]
    if moe:
        body += [
            "  - name: blockfp8-moe-configs",
            f"    mountPath: {_yaml(MOE_CONTAINER_DIR)}",
            "    readOnly: true",
            "env:",
        ]
        for env in folder_envs(moe):
            body += [f"  - name: {env}", f"    value: {_yaml(MOE_CONTAINER_DIR)}"]
    return body
