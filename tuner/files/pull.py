"""`tuner pull`'s core (pure apart from the folder it writes): pick a published release, check
every downloaded file against its sha256, and replace a folder's files with it.

Nothing here speaks HTTP: the caller downloads, this checks and writes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tuner.core import minor_of
from tuner.files.format import dump_config_file, parse_config_file
from tuner.files.merge import write_atomically
from tuner.inputs.devices import engine_device_name
from tuner.kernels.registry import family_of_file

# Written last into the folder: which release it holds and its files (the next pull removes
# those the new release lacks).
MARKER = ".blockfp8-release.json"


class PullError(Exception):
    """A pull that must not touch the folder: no such release, or a file whose bytes do not
    match its sha256. One line."""


def choose_release(
    releases: Sequence[Mapping[str, Any]], device_name: str, number: int | None
) -> Mapping[str, Any]:
    """The release to pull: number `number`, or the newest.

    Args:
        releases: `GET /devices/{device}/releases` as parsed JSON.
        device_name: for the error line.
        number: the pinned release, or None.

    Raises:
        PullError: the device has no release, or none with that number.
    """
    if not releases:
        raise PullError(f"{device_name} has no published release (`tuner publish` makes one)")
    if number is None:
        return max(releases, key=lambda r: r["number"])
    for release in releases:
        if release["number"] == number:
            return release
    have = ", ".join(str(r["number"]) for r in sorted(releases, key=lambda r: r["number"]))
    raise PullError(f"{device_name} has no release {number}; releases: {have}")


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


def saved_names(release: Mapping[str, Any], engine: str) -> dict[str, str]:
    """Each file of a release (vLLM's name) -> the name `engine` reads it under (its device
    part too)."""
    gpus, device = release_tuned(release, "gpu_name"), release["device_name"]
    names = [f["file_name"] for f in release["files"]]
    return {name: served_file_name(name, device, engine, gpus) for name in names}


def release_tuned(release: Mapping[str, Any], key: str) -> list[str]:
    """One field of each environment in a release summary's `tuned_with` ("" where absent):
    the GPU names ("gpu_name") or compute capabilities ("compute_capability", for
    `tuner.inputs.backends.device_advice`) its winners were timed on."""
    tuned = (release.get("summary") or {}).get("tuned_with") or []
    return [str(e.get(key) or "") for e in tuned]


def engine_bytes(file_name: str, body: bytes, engine: str) -> bytes:
    """A released file's bytes as `engine` reads them: a fused-MoE file for SGLang without its
    `"triton_version"` key (SGLang 0.5.23's get_moe_configs, fused_moe_triton_config.py, turns
    every key into an int and would raise on it); every other file as released.

    Raises:
        ValueError: a MoE file whose body is not a config file (never for checked bytes).
    """
    if engine != "sglang" or not family_of_file(file_name).files.file_triton_version:
        return body
    return dump_config_file(parse_config_file(body.decode("utf-8"), source=file_name)).encode()


def replace_folder(
    folder: Path, release: Mapping[str, Any], engine: str, contents: Mapping[str, bytes]
) -> tuple[list[str], list[str]]:
    """Put a release into `folder` once every file's bytes have their sha256 (`write_atomically`:
    a reader sees each file whole, old or new); files of the previous pull that the release no
    longer has are removed; the marker, naming the release and its files, is written last.
    Each file is written as `engine` reads it (`engine_bytes`).

    Args:
        folder: the folder (created when missing).
        release: the release (`choose_release`).
        engine: "vllm" or "sglang": the names the files are saved under.
        contents: file name (vLLM's spelling) -> bytes as downloaded.

    Returns:
        (names written, names removed).

    Raises:
        PullError: naming the first file missing or whose sha256 differs; nothing written.
    """
    for file in release["files"]:
        name, want = file["file_name"], file["sha256"]
        got = hashlib.sha256(contents[name]).hexdigest()
        if got != want:
            raise PullError(f"{name}: sha256 {got} is not the release's {want}; nothing written")
    try:
        previous = json.loads((folder / MARKER).read_text()).get("files", [])
    except (OSError, ValueError, AttributeError):
        previous = []
    names = saved_names(release, engine)
    bodies = {saved: engine_bytes(name, contents[name], engine) for name, saved in names.items()}
    write_atomically(folder, bodies)
    removed = [
        name
        for name in sorted(set(previous) - set(bodies))
        if "/" not in name and (folder / name).is_file()
    ]
    for name in removed:
        (folder / name).unlink()
    marker = {
        "device_name": release["device_name"],
        "release": release["number"],
        "engine": engine,
        "content_sha256": release["content_sha256"],
        "files": list(bodies),
    }
    write_atomically(folder, {MARKER: (json.dumps(marker, indent=2) + "\n").encode()})
    return list(bodies), removed


def release_entry(info: Any) -> dict[str, Any]:
    """A stored release (`db.files.ReleaseInfo`) as one entry of `GET /devices/{device}/releases`
    (what `choose_release` and the recipes read): its fields, each file's with its merge
    `detail`, and its A/B's id and verdict (`ab`)."""
    entry = asdict(info)
    entry["files"] = [{**asdict(f), **f.detail} for f in info.files]
    return entry


def one_triton(versions: Mapping[str, Sequence[str]]) -> str | None:
    """The one Triton version winners were timed with (`DeviceView.versions`, a release
    summary's `versions`), or None when they name none or several."""
    timed = versions.get("triton") or []
    return timed[0] if len(timed) == 1 else None


def version_mismatch(
    release: Mapping[str, Any], *, triton: str | None, vllm: str | None
) -> str | None:
    """One line when the Triton or vLLM importable here differs from what the release's
    winners were timed with (its summary's `versions`); None when they agree, when nothing
    is importable here, or when the release (published before versions were recorded) says
    nothing.

    Args:
        release: the release as the service lists it.
        triton: the local Triton's version, or None.
        vllm: the local vLLM's version, or None.
    """
    versions = (release.get("summary") or {}).get("versions") or {}
    differ = []
    timed = versions.get("triton") or []
    if triton is not None and timed and minor_of(triton) not in {minor_of(v) for v in timed}:
        differ.append(f"triton {triton} here, {', '.join(timed)} in the release")
    timed = versions.get("vllm") or []
    if vllm is not None and timed and vllm not in timed:
        differ.append(f"vLLM {vllm} here, {', '.join(timed)} in the release")
    if vllm is not None and (versions.get("kernel_source") or []) == ["builtin"]:
        differ.append("the release timed the tuner's builtin kernels, not this vLLM's")
    if not differ:
        return None
    return f"warning: release {release.get('number')} was tuned elsewhere: {'; '.join(differ)}"
