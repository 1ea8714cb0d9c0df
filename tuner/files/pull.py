"""`tuner pull`'s core (pure apart from the folder it writes): pick a published release, check
every downloaded file against its sha256, and replace a folder's files with it.

Nothing here speaks HTTP: the caller downloads, this checks and writes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Wanted:
    """One file of a release to save: its name in the release (vLLM's spelling), the name to
    save it under (the engine's spelling), and the sha256 its bytes must have."""

    file_name: str
    save_as: str
    sha256: str


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
        raise PullError(
            f"{device_name} has no published release on the server (`tuner publish "
            f"--device {device_name}` there makes one)"
        )
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


def wanted_files(release: Mapping[str, Any], engine: str) -> list[Wanted]:
    """The release's files with the names `engine` reads them under (its device part too)."""
    gpus = release_tuned(release, "gpu_name")
    return [
        Wanted(
            f["file_name"],
            served_file_name(f["file_name"], release["device_name"], engine, gpus),
            f["sha256"],
        )
        for f in release["files"]
    ]


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
    files = wanted_files(release, engine)
    for wanted in files:
        got = hashlib.sha256(contents[wanted.file_name]).hexdigest()
        if got != wanted.sha256:
            raise PullError(
                f"{wanted.file_name}: sha256 {got} is not the release's {wanted.sha256}; "
                "nothing written"
            )
    try:
        previous = json.loads((folder / MARKER).read_text()).get("files", [])
    except (OSError, ValueError, AttributeError):
        previous = []
    bodies = {w.save_as: engine_bytes(w.file_name, contents[w.file_name], engine) for w in files}
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
    """A stored release (`db.releases.ReleaseInfo`) as the fields of one entry of `GET
    /devices/{device}/releases` that `choose_release` and the recipes read: device_name,
    number, content_sha256, files (file_name, sha256), summary and ab (its A/B's verdict)."""
    return {
        "ab": info.ab and {"ab_test_id": info.ab.ab_test_id, "verdict": info.ab.verdict},
        "device_name": info.device_name,
        "number": info.number,
        "content_sha256": info.content_sha256,
        "summary": dict(info.summary or {}),
        "files": [{"file_name": f.file_name, "sha256": f.sha256} for f in info.files],
    }


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
    return (
        f"warning: release {release.get('number')} was tuned elsewhere: {'; '.join(differ)} "
        "(configs are facts about one Triton and kernel)"
        if differ
        else None
    )
