"""`tuner pull`: download a published release from the tuner service into a folder that a serving
container mounts read-only; every file checked against its sha256. The checks and the writing
are tuner.files.pull's; this module speaks HTTP (urllib, no extra dependency)."""

from __future__ import annotations

import importlib.metadata
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any
from urllib.error import HTTPError, URLError
from urllib.parse import quote
from urllib.request import urlopen

import typer

from tuner.cli.errors import fail
from tuner.cli.options import EngineName, EngineOpt
from tuner.cli.output import out_folder, plain
from tuner.files.pull import (
    PullError,
    check_downloads,
    choose_release,
    holds,
    release_tuned,
    replace_folder,
    version_mismatch,
    wanted_files,
)
from tuner.inputs.backends import device_advice
from tuner.kernels.source import vllm_version


def fetch(url: str) -> bytes:
    """GET `url`'s body within 30 s (tests replace this).

    Raises:
        OSError: the server cannot be reached, or answered with an HTTP error (the message
            carries the status and the service's `detail`).
    """
    try:
        with urlopen(url, timeout=30) as response:  # noqa: S310 - http(s) checked by server_url
            return response.read()
    except HTTPError as exc:
        try:
            detail = json.loads(exc.read()).get("detail")
        except (ValueError, AttributeError):
            detail = None
        # The tuner service answers every error with a JSON detail; without one, something
        # else answered at that address.
        tail = (
            f": {detail}"
            if detail
            else ", with no detail: not the tuner service's answer (check --server)"
        )
        raise OSError(f"HTTP {exc.code} from {url}{tail}") from None
    except URLError as exc:  # no answer at all: refused, unknown host, timed out
        reason = getattr(exc.reason, "strerror", None) or exc.reason
        raise OSError(f"cannot reach {url}: {reason}") from None


def server_url(server: str) -> str:
    """--server checked (an http:// or https:// URL, else one line, exit 2), without a
    trailing slash."""
    if not server.startswith(("http://", "https://")):
        raise fail(f"--server must be an http:// or https:// URL, got {server!r}")
    return server.rstrip("/")


def releases_of(server: str, device: str, hint: str = "") -> list[dict]:
    """`GET /devices/{device}/releases` of the server, parsed; exit 1 with one line (and
    `hint` when the server did not answer at all) when it cannot answer."""
    try:
        return json.loads(fetch(f"{server_url(server)}/devices/{quote(device, safe='')}/releases"))
    except OSError as exc:
        raise fail(str(exc) + ("" if str(exc).startswith("HTTP ") else hint), 1) from None
    except ValueError as exc:
        raise fail(str(exc), 1) from None


ServerOpt = Annotated[
    str, typer.Option("--server", help="The tuner service's URL, e.g. http://tuner:8000.")
]
OutOpt = Annotated[
    Path,
    typer.Option(
        help="The folder to fill; files of the previous pull that the release no longer has "
        "are removed."
    ),
]
ReleaseOpt = Annotated[
    int | None, typer.Option("--release", min=1, help="The release to pull [default: the newest].")
]
StrictOpt = Annotated[
    bool,
    typer.Option(
        "--strict",
        help="Exit 1 (writing nothing) when the Triton or vLLM here differs from the release's.",
    ),
]


def pull(
    server: ServerOpt,
    device: Annotated[
        str, typer.Option(help="The device, as the service names it (aliases such as L20 work).")
    ],
    out: OutOpt,
    release: ReleaseOpt = None,
    engine_name: EngineOpt = EngineName.vllm,
    strict: StrictOpt = False,
) -> None:
    """Download a published release of a device's config files into a folder.

    Every file is checked against the release's sha256 before anything is written; then all
    are put in place (each renamed whole into the folder) and a marker names the release.
    When the folder already holds that release nothing is downloaded.

    Where Triton or vLLM is importable here and differs from what the release's winners were
    timed with, one warning line says so (with --strict: exit 1, nothing written).

    Exit codes: 0 done (or already there); 1 the server cannot answer, the release does not
    exist or a file's bytes do not match (the folder is untouched), or --strict and the
    versions differ; 2 bad input.
    """
    out_folder(out)
    base, engine = server_url(server), engine_name.value
    chosen = _chosen(base, device, release, strict)
    name, number = chosen["device_name"], chosen["number"]
    if holds(out, chosen, engine):
        plain(f"{out} already holds {name} release {number}; nothing to do")
        return
    try:
        written, removed = replace_folder(out, chosen, engine, _download(base, chosen, engine))
    except OSError as exc:
        raise fail(f"{out}: cannot write: {exc.strerror or exc}", 1) from None
    gone = f"; removed {len(removed)} file(s) of the previous release" if removed else ""
    plain(
        f"pulled {name} release {number} into {out}: {len(written)} file(s), sha256 checked{gone}"
    )
    if engine_name == EngineName.vllm:
        # Whether vLLM reads the files on the device the release was tuned on.
        for line in device_advice(str(name), release_tuned(chosen, "compute_capability")).lines():
            plain(line)


def _chosen(base: str, device: str, release: int | None, strict: bool) -> Mapping[str, Any]:
    """The release to pull, after one warning line when the Triton or vLLM here differs from
    the release's (`strict`: exit 1 instead)."""
    try:
        chosen = choose_release(releases_of(base, device), device, release)
    except PullError as exc:
        raise fail(str(exc), 1) from None
    mismatch = version_mismatch(chosen, triton=_installed("triton"), vllm=vllm_version())
    if mismatch is not None and strict:
        raise fail(mismatch.removeprefix("warning: ") + "; --strict: nothing written", 1)
    if mismatch is not None:
        typer.echo(mismatch, err=True)
    return chosen


def _download(base: str, chosen: Mapping[str, Any], engine: str) -> dict[str, bytes]:
    """File name -> the bytes of each file of the release, each checked against its sha256;
    exit 1 with one line when one cannot be fetched or does not match."""
    name, number = quote(chosen["device_name"], safe=""), chosen["number"]
    wanted = wanted_files(chosen, engine)
    contents = {}
    try:
        for file in wanted:
            url = f"{base}/devices/{name}/configs/{quote(file.file_name, safe='')}?release={number}"
            contents[file.file_name] = fetch(url)
    except OSError as exc:
        raise fail(f"{exc}; nothing written", 1) from None
    try:
        check_downloads(wanted, contents)
    except PullError as exc:
        raise fail(str(exc), 1) from None
    return contents


def _installed(name: str) -> str | None:
    """A package's version from its metadata (not imported), or None."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None
