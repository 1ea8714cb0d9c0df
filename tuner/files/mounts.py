"""Ready-to-paste read-only mounts of config files into a serving container: `docker run`
flags, or YAML dumped from data (PyYAML) for compose and Kubernetes.

Each release reads a family's files where its row says (`tuner.files.engine_folders`): a file
read from the engine's package folder is mounted there on its own, under the engine's spelling,
so the files the engine ships stay visible. A family whose engine reads a folder named by an
environment variable first (vLLM's fused-MoE files, VLLM_TUNED_CONFIG_FOLDER) gets one
read-only folder mount with the variable set to it. Kubernetes gets each group as a ConfigMap
manifest (valid keys, `items` mapping each key to the engine's file name).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, get_args

import yaml

from tuner.files.engine_folders import engine_folder, engine_version, folder_for, unchecked_line
from tuner.inputs.backends import device_advice
from tuner.inputs.devices import engine_device_name
from tuner.kernels.engines import SGLANG_NOTE, TRITON_PLACEHOLDER
from tuner.kernels.family import LINEAR_LAYERS
from tuner.kernels.registry import DEFAULT_FAMILY, family_of_file, get_family
from tuner.kernels.shape import PER_TENSOR, Shape
from tuner.kernels.vllm_table import TRITON_FLAG

if TYPE_CHECKING:  # the store's merge; `tuner pull` in an init container loads no store code
    from tuner.files.device import StoreFiles

# The forms of `tuner mounts` and the mounts route: mounts, then pull recipes (`PULL_FORMATS`).
MountFormat = Literal["docker", "compose", "k8s", "k8s-pull", "compose-pull"]
FORMATS: tuple[str, ...] = get_args(MountFormat)[:3]
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
_FIND_SITE = 'python3 -c "import os, {0}; print(os.path.dirname(os.path.dirname({0}.__file__)))"'
# A path pasted into a shell's double quotes and a `-v src:dst:ro` flag as it is.
_PATH_RE = re.compile(r"/[^\x00\n\r\"'`$\\:]{0,511}")


class FileMount(NamedTuple):
    """A file mounted on its own: its name as given, where it goes in the container, its
    ConfigMap key, and its name there (the engine's spelling)."""

    src: str
    target: str
    key: str
    dst: str


@dataclass
class FolderMount:
    """A family's files read from one folder that `env` names: the family, the folder in the
    container, and its files as (name, ConfigMap key)."""

    family: str
    env: str
    target: str
    files: list[tuple[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class Placed:
    """Where the engine reads each file: file mounts, folder mounts, and the comment line on
    a folder that depends on the serving image's Triton."""

    files: list[FileMount]
    folders: list[FolderMount]
    notes: list[str]


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
        compute_capability: the device's, e.g. "8.9", when known; None otherwise.
        tuned_with: what the winners were timed with, printed in the header; "" for none.
        engine_version: the engine's release (its folders); None for the newest checked.
        triton_version: the serving image's Triton (SGLang's fused-MoE folder); None for none.
        contents: file name -> its text: the ConfigMaps' data (`k8s` needs it).
        left_out: comment lines on imported entries the files leave out (`DeviceFiles.left_out`).
        gpu_names: the GPU's names as CUDA reported them (the engine's device part).
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
    contents: Mapping[str, str] | None = None
    left_out: tuple[str, ...] = ()
    gpu_names: tuple[str, ...] = ()


def versions_line(versions: dict) -> str:
    """A `DeviceView.versions` (a release's summary keeps it) as one line: "torch 2.14.0,
    triton 3.8.0, vLLM 0.33.0, kernels of vllm"; "" when it names none."""
    labels = {"torch": "torch", "triton": "triton", "vllm": "vLLM", "kernel_source": "kernels of"}
    return ", ".join(f"{labels[k]} {', '.join(versions[k])}" for k in labels if versions.get(k))


def store_request(read: StoreFiles, triton: str | None, **given: Any) -> MountRequest:
    """The request that mounts a device's merged files from the store (`tuner mounts` and
    `GET /devices/{d}/mounts` alike): its key, files, compute capability, what its winners were
    timed with, the GPU's names and the imported entries left out; `triton`: the Triton asked
    for, else the winners' one Triton; `given`: the other fields."""
    view, contents = read.view, {f.file_name: f.merged.text for f in read.files.files}
    timed = view.versions["triton"]
    return MountRequest(
        device_name=view.device_name,
        file_names=tuple(contents),
        contents=contents,
        compute_capability=view.compute_capability,
        tuned_with=versions_line(view.versions),
        triton_version=triton or (timed[0] if len(timed) == 1 else None),
        gpu_names=tuple(e.gpu_name for e in view.environments),
        left_out=tuple(f"# {line}" for line in read.files.left_out),
        **given,
    )


def check_path(path: str, option: str = "--site-packages") -> str:
    """An absolute path (or one under "$PWD/") that can be pasted as it is into a shell's
    double quotes and a `-v src:dst:ro` flag, without a trailing slash.

    Raises:
        ValueError: a relative path, or one with quotes, '$', '\\', ':' or '..'.
    """
    rest = path.removeprefix("$PWD") if path.startswith("$PWD/") else path
    if not _PATH_RE.fullmatch(rest) or "/../" in f"{rest}/":
        raise ValueError(
            f"{option} must be an absolute path without quotes, '$', '\\', ':' or '..', "
            f"got {path[:80]!r}"
        )
    return path.rstrip("/") or "/"


def configmap_key(shape: Shape) -> str:
    """A file's key in a ConfigMap (Kubernetes allows only [-._a-zA-Z0-9]), from the shape its
    name gives: `n5120-k3072-b128x128.json`, `e128-n384-b128x128.json` (no K in the name),
    `n512-k256-per-tensor.json` (no block scales)."""
    params = "".join(f"{name.lower()}{value}-" for name, value in shape.params)
    k = f"-k{shape.K}" if shape.K else ""
    block = shape.block_shape
    blocks = PER_TENSOR if block is None else f"b{block[0]}x{block[1]}"
    return f"{params}n{shape.N}{k}-{blocks}.json"


def configmap_name(device_name: str) -> str:
    """A ConfigMap name (a DNS-1123 label) for a device: `blockfp8-nvidia-l20`; a name with
    other characters, or too long, is cut and gets 8 hex digits of its sha256."""
    slug = re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-")
    name = f"blockfp8-{slug}".rstrip("-")
    if re.fullmatch(r"[A-Za-z0-9]+(?:[_-][A-Za-z0-9]+)*", device_name) and len(name) <= 63:
        return name
    digest = hashlib.sha256(device_name.encode("utf-8")).hexdigest()[:8]
    return f"{name[:54].rstrip('-')}-{digest}"


def served_file_name(
    name: str, device_name: str, engine: str, gpu_names: Sequence[str] = ()
) -> str:
    """A config file's name (either spelling) as `engine` reads it for a device: its family's
    name of its shape, with the device part the engine writes (`engine_device_name` of the
    device key and the GPU's names as CUDA reported them).

    Raises:
        ValueError: a name no family parses.
    """
    family = family_of_file(name)
    device = engine_device_name(engine, device_name, gpu_names)
    return family.files.file_name(family.files.parse_file_name(name)[0], device, engine)


def place(
    names: Sequence[str],
    device_name: str,
    engine: str,
    site: str,
    release: str,
    triton: str | None = None,
    gpu_names: Sequence[str] = (),
) -> Placed:
    """Where `engine`'s release reads each file (each family's own row), sorted by name.

    Args:
        names: the files, in either spelling.
        device_name: vLLM's device key.
        engine: "vllm" or "sglang".
        site: the engine's site-packages folder (checked).
        release: the engine's release.
        triton: the serving image's Triton, or None.
        gpu_names: the GPU's names as CUDA reported them, for the engine's device part
            (`engine_device_name`).

    Raises:
        ValueError: a name no family parses; a folder per Triton and no Triton version.
    """
    files: list[FileMount] = []
    folders: dict[str, FolderMount] = {}
    notes: list[str] = []
    for name in sorted(names):
        family = family_of_file(name)
        key = configmap_key(family.files.parse_file_name(name)[0])
        row = engine_folder(engine, family.name, release)
        if row.env:
            target = f"{FOLDER_ROOT}/{family.name}-configs"
            folders.setdefault(family.name, FolderMount(family.name, row.env, target))
            folders[family.name].files.append((name, key))
            continue
        folder = f"{site}/{folder_for(engine, family.name, release, triton)}"
        if TRITON_PLACEHOLDER in row.folder and not notes:
            notes.append(f"# {folder}/ is SGLang's folder for Triton {triton}: the serving image's")
        dst = served_file_name(name, device_name, engine, gpu_names)
        files.append(FileMount(name, f"{folder}/{dst}", key, dst))
    return Placed(files, list(folders.values()), notes)


def folder_lines(placed: Placed, where: str) -> list[str]:
    """One comment line per folder mount: its files, where, and the variable set to it."""
    return [
        f"# {len(f.files)} {get_family(f.family).report.short_title or f.family} file(s): "
        f"{where} mounted read-only at {f.target}/, with {f.env}={f.target}."
        for f in placed.folders
    ]


def render_mounts(request: MountRequest) -> str:
    """The mounts of every file, as text to paste into a command line, compose file or pod spec.

    Returns:
        Commented text ending in a newline.

    Raises:
        ValueError: an unknown engine or format, a bad site-packages path, host folder or
            engine version, no files, a file name that is not a config file name, k8s without
            the files' contents, or SGLang MoE files without a Triton version.
    """
    if request.fmt not in FORMATS:
        raise ValueError(f"format {request.fmt!r} is not one of {', '.join(FORMATS)}")
    release = engine_version(request.engine, request.engine_version)  # the engine checked too
    if not request.file_names:
        raise ValueError(f"no config files for {request.device_name} to mount")
    site = check_path(request.site_packages)
    host_dir = check_path(request.host_dir, "the host folder")
    placed = place(
        request.file_names,
        request.device_name,
        request.engine,
        site,
        release,
        request.triton_version,
        request.gpu_names,
    )
    head = [
        f"# {len(placed.files)} read-only mount(s) of W8A8 block-FP8 configs for "
        f"{request.device_name} ({request.engine} {release}; restart it after changing them).",
        *engine_lines(request.engine, release, site),
        *([f"# Tuned with {request.tuned_with}."] if request.tuned_with else []),
        *folder_lines(placed, f"{host_dir}/"),
        *placed.notes,
        *request.left_out,
    ]
    capabilities = [request.compute_capability or ""]
    head += advice_comments(request.device_name, capabilities, request.engine)
    flag = needs_flag(request.device_name, capabilities, request.engine, request.file_names)
    if request.fmt == "docker":
        body = docker_body(placed, host_dir)
    elif request.fmt == "compose":
        body = compose_body(placed, host_dir, request.engine)
    else:
        if request.contents is None:
            raise ValueError("the k8s format needs the files' contents (its ConfigMaps' data)")
        body = k8s_body(request.device_name, placed, request.contents)
    return "\n".join(head + body + (flag_lines(request.fmt) if flag else [])) + "\n"


def engine_lines(engine: str, release: str, site: str) -> list[str]:
    """Where the release reads dense files, how to find the image's site-packages, and a note
    on a release never checked."""
    unchecked = unchecked_line(engine, release)
    return [
        f"# {engine} {release} reads dense files only from "
        f"{site}/{folder_for(engine, DEFAULT_FAMILY, release)}/",
        f"# (site-packages in your image: {_FIND_SITE.format(engine)};",
        "# another release reads elsewhere: give it as --engine-version)",
        *([f"# {unchecked}"] if unchecked else []),
    ]


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


def docker_body(placed: Placed, host_dir: str) -> list[str]:
    """`docker run` flags: one `-v` per file, then each folder and its variable."""
    flags = [f'-v "{host_dir}/{f.src}:{f.target}:ro"' for f in placed.files]
    for folder in placed.folders:
        flags += [f'-v "{host_dir}:{folder.target}:ro"', f"-e {folder.env}={folder.target}"]
    head = "# Insert in `docker run`, before the image name's line (each line ends in \\):"
    return [head] + [f"  {flag} \\" for flag in flags]


def compose_body(placed: Placed, host_dir: str, engine: str) -> list[str]:
    """A compose file for the serving service: a bind mount per file and folder."""
    bind = [(f"{host_dir}/{f.src}", f.target) for f in placed.files]
    bind += [(host_dir, folder.target) for folder in placed.folders]
    volumes = [
        {"type": "bind", "source": source, "target": target, "read_only": True}
        for source, target in bind
    ]
    return compose_file(engine, {"volumes": volumes}, placed)


def compose_file(
    engine: str, service: dict[str, Any], placed: Placed, before: Any = None, top: Any = None
) -> list[str]:
    """A compose file to add after the user's (`docker compose -f docker-compose.yml -f
    THIS.yml` merges it into theirs): the services `before`, the serving service (`service`,
    with the folders' variables), then the `top` keys."""
    if placed.folders:
        service["environment"] = {f.env: f.target for f in placed.folders}
    return [
        f"# A compose file to add after yours (docker compose -f docker-compose.yml -f "
        f"blockfp8.yml up); {engine} is your serving service's name:"
    ] + dump_yaml({"services": {**(before or {}), engine: service}, **(top or {})})


def k8s_body(device_name: str, placed: Placed, contents: Mapping[str, str]) -> list[str]:
    """ConfigMap manifests of the files, then the pod spec's volumes and the serving
    container's mounts (`k8s_parts`: each folder mounts its own ConfigMap's volume)."""
    name = configmap_name(device_name)
    groups = [(VOLUME, name, [(f.src, f.key, f.dst) for f in placed.files])] if placed.files else []
    groups += [
        (f"blockfp8-{f.family}-configs", f"{name}-{f.family}", [(s, k, s) for s, k in f.files])
        for f in placed.folders
    ]
    body = ["# The ConfigMap(s): save as blockfp8-configmaps.yaml, then kubectl apply -f it."]
    volumes = []
    for volume, configmap, files in groups:
        data = {key: contents[src] for src, key, _ in files}
        manifest = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": configmap}}
        body += ["---", *dump_yaml(manifest | {"data": data})]
        items = [{"key": key, "path": dst} for _, key, dst in files]
        volumes.append({"name": volume, "configMap": {"name": configmap, "items": items}})
    return body + ["---"] + k8s_parts({"volumes": volumes}, placed, "")


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
    return [
        "# In the pod spec:",
        *dump_yaml(pod),
        "# In the serving container:",
        *dump_yaml(container),
    ]


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
        fmt: one of `FORMATS`, or "compose-pull" / "k8s-pull".
    """
    if fmt == "docker":
        return ["# After the image name, with the server's other arguments:", f"  {TRITON_FLAG}"]
    where = "service's command:" if fmt.startswith("compose") else "container's args:"
    return [
        f"# vLLM reads the files only with {TRITON_FLAG}: append to the serving {where}",
        *(f"#   - {part}" for part in TRITON_FLAG.split()),
    ]
