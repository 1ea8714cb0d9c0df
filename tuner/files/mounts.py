"""Ready-to-paste read-only mounts of config files into a serving container, one renderer per
format: `docker run` flags, or YAML dumped from data (PyYAML) for compose and Kubernetes; and
the recipes that run `tuner pull` of a pinned release before the engine starts (a Kubernetes
init container, a compose one-shot service).

Each engine's newest checked release (`tuner.files.engine_folders`) reads a family's files
where its row says: a file read from the engine's package folder is mounted there on its own,
under the engine's spelling, so the files the engine ships stay visible. A family whose engine
reads a folder named by an environment variable first (vLLM's fused-MoE files,
VLLM_TUNED_CONFIG_FOLDER) gets one read-only folder mount with the variable set to it.
Kubernetes gets each group as a ConfigMap manifest (valid keys, `items` mapping each key to the
engine's file name).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, get_args

import yaml

from tuner.files.engine_folders import DEFAULT_ENGINE_VERSIONS, engine_folder, folder_for
from tuner.files.pull import one_triton, release_tuned, served_file_name
from tuner.inputs.backends import device_advice
from tuner.kernels.engines import SGLANG_NOTE
from tuner.kernels.family import LINEAR_LAYERS
from tuner.kernels.registry import family_of_file, get_family
from tuner.kernels.vllm_table import TRITON_FLAG

# The forms of `tuner mounts` and the mounts route: mounts, then pull recipes.
MountFormat = Literal["docker", "compose", "k8s", "k8s-pull", "compose-pull"]
PULL_FORMATS: tuple[str, ...] = get_args(MountFormat)[3:]
# Where the engine's package lives in its usual image: vLLM's vllm/vllm-openai image installs
# into Python 3.12's dist-packages (as the README's example); SGLang's lmsysorg/sglang image runs
# an editable checkout, /sgl-workspace/sglang/python (the path its own warnings print).
DEFAULT_SITE_PACKAGES: dict[str, str] = {
    "vllm": "/usr/local/lib/python3.12/dist-packages",
    "sglang": "/sgl-workspace/sglang/python",
}
DEFAULT_HOST_DIR = "$PWD/configs"
# Where a folder read through an environment variable is mounted: `<root>/<family>-configs`.
FOLDER_ROOT = "/opt/blockfp8-tuner"
VOLUME = "blockfp8-configs"
# The image `tuner pull` runs in: the project's Dockerfile (no torch or triton needed).
PULL_IMAGE = "blockfp8-tuner"
FIND_SITE = 'python3 -c "import os, {0}; print(os.path.dirname(os.path.dirname({0}.__file__)))"'
# A path pasted into a shell's double quotes and a `-v src:dst:ro` flag as it is.
_PATH_RE = re.compile(r"/[^\x00\n\r\"'`$\\:]{0,511}")


class FileMount(NamedTuple):
    """A file mounted on its own: its name as given, where it goes in the container, and its
    name there (the engine's spelling)."""

    src: str
    target: str
    dst: str


@dataclass
class FolderMount:
    """A family's files read from one folder that `env` names: the family, the folder in the
    container, and its files' names."""

    family: str
    env: str
    target: str
    files: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Placed:
    """Where the engine reads each file: file mounts and folder mounts."""

    files: list[FileMount]
    folders: list[FolderMount]


@dataclass(frozen=True)
class MountRequest:
    """What to mount, for which engine, in which format.

    Attributes:
        device_name: vLLM's device key the files are for.
        engine: "vllm" or "sglang".
        fmt: one of `MountFormat`.
        files: file name (either spelling) -> its text (the ConfigMaps' data; "" for a recipe).
        host_dir: the host folder that holds them ("$PWD/..." is left for the shell to expand).
        capabilities: the device's compute capabilities, e.g. ["8.9"] ("" where unknown).
        triton: the one Triton the files were tuned with (SGLang's fused-MoE folder), or None.
        gpu_names: the GPU's names as CUDA reported them (the engine's device part).
        notes: comment lines of the header (what the files were tuned with, entries left out).
        pull: a recipe's `tuner pull` command; empty for mounts of files on the host.
    """

    device_name: str
    engine: str
    fmt: str
    files: Mapping[str, str]
    host_dir: str = DEFAULT_HOST_DIR
    capabilities: Sequence[str] = ()
    triton: str | None = None
    gpu_names: Sequence[str] = ()
    notes: Sequence[str] = ()
    pull: Sequence[str] = ()


def versions_line(versions: dict) -> str:
    """A `DeviceView.versions` (a release's summary keeps it) as one line: "torch 2.14.0,
    triton 3.8.0, vLLM 0.33.0, kernels of vllm"; "" when it names none."""
    labels = {"torch": "torch", "triton": "triton", "vllm": "vLLM", "kernel_source": "kernels of"}
    return ", ".join(f"{labels[k]} {', '.join(versions[k])}" for k in labels if versions.get(k))


def release_request(release: Mapping[str, Any], fmt: str, engine: str, server: str) -> MountRequest:
    """The recipe that pulls release `release` (an entry of `GET /devices/{d}/releases`) from
    `server`, the service's URL as the pods reach it, into a volume the engine mounts."""
    device, number = release["device_name"], release["number"]
    names = [f["file_name"] for f in release["files"]]
    title = (
        f"# {device} release {number} ({len(names)} file(s), content "
        f"{release['content_sha256'][:12]}), pulled (every sha256 checked) before {engine} "
        "starts and mounted read-only file by file."
    )
    image = (
        f"# {PULL_IMAGE}: docker build -t {PULL_IMAGE} . in the tuner's source (for a cluster, "
        "push it to your registry and set image: to it)."
    )
    args = [
        *("tuner", "pull", "--server", server, "--device", device),
        *("--release", str(number), "--engine", engine, "--out", "/configs"),
    ]
    return MountRequest(
        device,
        engine,
        fmt,
        files=dict.fromkeys(names, ""),
        capabilities=release_tuned(release, "compute_capability"),
        triton=one_triton((release.get("summary") or {}).get("versions") or {}),
        gpu_names=release_tuned(release, "gpu_name"),
        notes=[title, image],
        pull=args,
    )


def check_path(path: str) -> str:
    """The host folder, absolute (or under "$PWD/") and pasteable as it is into a shell's double
    quotes and a `-v src:dst:ro` flag, without a trailing slash.

    Raises:
        ValueError: a relative path, or one with quotes, '$', '\\', ':' or '..'.
    """
    rest = path.removeprefix("$PWD") if path.startswith("$PWD/") else path
    if not _PATH_RE.fullmatch(rest) or "/../" in f"{rest}/":
        raise ValueError(
            "the host folder must be an absolute path without quotes, '$', '\\', ':' or '..', "
            f"got {path[:80]!r}"
        )
    return path.rstrip("/") or "/"


def configmap_key(name: str) -> str:
    """A file's key in a ConfigMap: its name with every character Kubernetes does not allow
    in a key ([-._a-zA-Z0-9]) as "_"."""
    return re.sub(r"[^-._a-zA-Z0-9]", "_", name)


def configmap_name(device_name: str) -> str:
    """A ConfigMap name (a DNS-1123 label) for a device: `blockfp8-nvidia-l20`; a name with
    other characters, or too long, is cut and gets 8 hex digits of its sha256."""
    slug = re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-")
    name = f"blockfp8-{slug}".rstrip("-")
    if re.fullmatch(r"[A-Za-z0-9]+(?:[_-][A-Za-z0-9]+)*", device_name) and len(name) <= 63:
        return name
    digest = hashlib.sha256(device_name.encode("utf-8")).hexdigest()[:8]
    return f"{name[:54].rstrip('-')}-{digest}"


def place(request: MountRequest, site: str) -> Placed:
    """Where the engine's newest checked release reads each file (each family's own row),
    sorted by name; `site`: the engine's site-packages in its image.

    Raises:
        ValueError: a name no family parses; a folder per Triton and no Triton version.
    """
    files: list[FileMount] = []
    folders: dict[str, FolderMount] = {}
    engine = request.engine
    for name in sorted(request.files):
        family = family_of_file(name)
        row = engine_folder(engine, family.name)
        if row.env:
            target = f"{FOLDER_ROOT}/{family.name}-configs"
            folders.setdefault(family.name, FolderMount(family.name, row.env, target))
            folders[family.name].files.append(name)
            continue
        folder = f"{site}/{folder_for(engine, family.name, None, request.triton)}"
        dst = served_file_name(name, request.device_name, engine, request.gpu_names)
        files.append(FileMount(name, f"{folder}/{dst}", dst))
    return Placed(files, list(folders.values()))


def render_mounts(request: MountRequest) -> str:
    """The mounts of every file, or a pull recipe, as commented text to paste into a command
    line, compose file or pod spec, ending in a newline.

    Raises:
        ValueError: an unknown engine or format, a bad host folder, no files, a file name that
            is not a config file name, or SGLang MoE files without one Triton version.
    """
    if request.fmt not in RENDERERS:
        raise ValueError(f"format {request.fmt!r} is not one of {', '.join(RENDERERS)}")
    release = DEFAULT_ENGINE_VERSIONS.get(request.engine)
    if release is None:
        raise ValueError(f"engine {request.engine!r} is not one of vllm, sglang")
    if not request.files:
        raise ValueError(f"no config files for {request.device_name} to mount")
    host_dir = check_path(request.host_dir)
    site = DEFAULT_SITE_PACKAGES[request.engine]
    placed = place(request, site)
    where = "the whole volume" if request.pull else f"{host_dir}/"
    head = [
        *request.notes,
        f"# {request.engine} {release}'s site-packages in its usual image: {site}; in yours: "
        f"{FIND_SITE.format(request.engine)}",
        *(
            f"# {len(f.files)} {get_family(f.family).report.short_title or f.family} file(s): "
            f"{where} mounted read-only at {f.target}/, with {f.env}={f.target}."
            for f in placed.folders
        ),
        *advice_comments(request.device_name, request.capabilities, request.engine),
    ]
    body = RENDERERS[request.fmt](placed, request, host_dir)
    names = list(request.files)
    flag = needs_flag(request.device_name, request.capabilities, request.engine, names)
    return "\n".join(head + body + (flag_lines(request.fmt) if flag else [])) + "\n"


class _Dumper(yaml.SafeDumper):
    """PyYAML's safe dumper, a text of several lines as a literal block (a file's JSON)."""


def _literal_str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    """A string node, as a literal block when it holds several lines."""
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_Dumper.add_representer(str, _literal_str)


def dump_yaml(data: Any) -> list[str]:
    """Data as YAML lines (PyYAML, keys in the order given)."""
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=10_000).splitlines()


def docker(placed: Placed, request: MountRequest, host_dir: str) -> list[str]:
    """`docker run` flags: one `-v` per file, then each folder and its variable."""
    flags = [f'-v "{host_dir}/{f.src}:{f.target}:ro"' for f in placed.files]
    for folder in placed.folders:
        flags += [f'-v "{host_dir}:{folder.target}:ro"', f"-e {folder.env}={folder.target}"]
    head = "# Insert in `docker run`, before the image name's line (each line ends in \\):"
    return [head] + [f"  {flag} \\" for flag in flags]


def compose(placed: Placed, request: MountRequest, host_dir: str) -> list[str]:
    """A compose file of the serving service: a bind mount per file and folder."""
    bind = [(f"{host_dir}/{f.src}", f.target) for f in placed.files]
    bind += [(host_dir, folder.target) for folder in placed.folders]
    volumes = [
        {"type": "bind", "source": source, "target": target, "read_only": True}
        for source, target in bind
    ]
    return compose_file(request.engine, {"volumes": volumes}, placed)


def compose_pull(placed: Placed, request: MountRequest, host_dir: str) -> list[str]:
    """A compose file: the one-shot pull service, the serving service's volumes (one subpath
    per file, needing Docker Engine 26+; the whole volume for a folder) and variables, and the
    named volume."""
    mount: dict[str, Any] = {"type": "volume", "source": VOLUME}
    volumes = [
        mount | {"target": f.target, "read_only": True, "volume": {"subpath": f.dst}}
        for f in placed.files
    ]
    volumes += [mount | {"target": f.target, "read_only": True} for f in placed.folders]
    depends = {"blockfp8-pull": {"condition": "service_completed_successfully"}}
    pull = {"image": PULL_IMAGE, "command": list(request.pull), "volumes": [f"{VOLUME}:/configs"]}
    service = {"depends_on": depends, "volumes": volumes}
    return compose_file(request.engine, service, placed, {"blockfp8-pull": pull}, VOLUME)


def compose_file(
    engine: str, service: dict[str, Any], placed: Placed, before: Any = None, volume: str = ""
) -> list[str]:
    """A compose file to add after the user's (`docker compose -f docker-compose.yml -f
    THIS.yml` merges it into theirs): the services `before`, the serving service (`service`,
    with the folders' variables), then the named `volume`, if any."""
    if placed.folders:
        service["environment"] = {f.env: f.target for f in placed.folders}
    data: dict[str, Any] = {"services": {**(before or {}), engine: service}}
    if volume:
        data["volumes"] = {volume: {}}
    return [
        f"# A compose file to add after yours (docker compose -f docker-compose.yml -f "
        f"blockfp8.yml up); {engine} is your serving service's name:"
    ] + dump_yaml(data)


def k8s(placed: Placed, request: MountRequest, host_dir: str) -> list[str]:
    """ConfigMap manifests of the files, then the pod spec's volumes and the serving
    container's mounts (`k8s_parts`: each folder mounts its own ConfigMap's volume)."""
    name = configmap_name(request.device_name)
    groups = [(VOLUME, name, [(f.src, f.dst) for f in placed.files])] if placed.files else []
    groups += [
        (f"blockfp8-{f.family}-configs", f"{name}-{f.family}", [(s, s) for s in f.files])
        for f in placed.folders
    ]
    body = ["# The ConfigMap(s): save as blockfp8-configmaps.yaml, then kubectl apply -f it."]
    volumes = []
    for volume, configmap, files in groups:
        data = {configmap_key(src): request.files[src] for src, _ in files}
        manifest = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": configmap}}
        body += ["---", *dump_yaml(manifest | {"data": data})]
        items = [{"key": configmap_key(src), "path": dst} for src, dst in files]
        volumes.append({"name": volume, "configMap": {"name": configmap, "items": items}})
    return body + ["---"] + k8s_parts({"volumes": volumes}, placed, "")


def k8s_pull(placed: Placed, request: MountRequest, host_dir: str) -> list[str]:
    """The pod spec's part (an emptyDir, the init container that pulls into it) and the serving
    container's (one subPath per file, the whole volume for a folder, its variable)."""
    init: dict[str, Any] = {"name": "blockfp8-pull", "image": PULL_IMAGE}
    init["command"] = list(request.pull)
    init["volumeMounts"] = [{"name": VOLUME, "mountPath": "/configs"}]
    pod = {"volumes": [{"name": VOLUME, "emptyDir": {}}], "initContainers": [init]}
    return k8s_parts(pod, placed, VOLUME)


def k8s_parts(pod: dict[str, Any], placed: Placed, folder_volume: str) -> list[str]:
    """The pod spec's part and the serving container's (one subPath of `VOLUME` per file, each
    folder whole from `folder_volume`, else its own volume, and the folders' variables), each
    under a comment saying where it goes."""
    mounts = [
        {"name": VOLUME, "mountPath": f.target, "subPath": f.dst, "readOnly": True}
        for f in placed.files
    ]
    mounts += [
        {"name": folder_volume or f"blockfp8-{f.family}-configs", "mountPath": f.target}
        | {"readOnly": True}
        for f in placed.folders
    ]
    container: dict[str, Any] = {"volumeMounts": mounts}
    if placed.folders:
        container["env"] = [{"name": f.env, "value": f.target} for f in placed.folders]
    pod_lines = ["# In the pod spec:", *dump_yaml(pod)]
    return pod_lines + ["# In the serving container:", *dump_yaml(container)]


RENDERERS: dict[str, Callable[[Placed, MountRequest, str], list[str]]] = {
    "docker": docker,
    "compose": compose,
    "k8s": k8s,
    "k8s-pull": k8s_pull,
    "compose-pull": compose_pull,
}


def advice_comments(device_name: str, capabilities: Sequence[str], engine: str) -> list[str]:
    """The device's advice as comment lines, printed by every form that hands out files: for
    vLLM, `tuner.inputs.backends.device_advice`'s lines; for SGLang, its note on the kernel the
    files were tuned on.

    Args:
        device_name: vLLM's device key, e.g. "NVIDIA_L20".
        capabilities: its compute capabilities, newest first ("" where unknown).
        engine: "vllm" or "sglang".
    """
    if engine != "vllm":
        return [f"# {SGLANG_NOTE}"]
    return [f"# {line}" for line in device_advice(device_name, capabilities).lines()]


def needs_flag(
    device_name: str, capabilities: Sequence[str], engine: str, file_names: Sequence[str]
) -> bool:
    """True when vLLM reads the files only with `TRITON_FLAG`: vLLM, a device where Triton is
    not the default linear kernel, and a file of a family that tunes linear layers (the other
    families' files are read whatever the linear backend)."""
    return (
        engine == "vllm"
        and device_advice(device_name, capabilities).needs_flag
        and any(family_of_file(name).shapes.model_part == LINEAR_LAYERS for name in file_names)
    )


def flag_lines(fmt: str) -> list[str]:
    """The server argument that makes vLLM run the Triton kernel (`needs_flag`), added to the
    user's own arguments, never replacing them: after the image name (docker); commented, as
    items to append to the serving service's `command:` or container's `args:` list.

    Args:
        fmt: one of `MountFormat`.
    """
    if fmt == "docker":
        return ["# After the image name, with the server's other arguments:", f"  {TRITON_FLAG}"]
    where = "service's command:" if fmt.startswith("compose") else "container's args:"
    return [
        f"# vLLM reads the files only with {TRITON_FLAG}: append to the serving {where}",
        *(f"#   - {part}" for part in TRITON_FLAG.split()),
    ]
