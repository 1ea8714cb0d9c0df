"""`tuner mounts`, `tuner serve` and `tuner pull`: mount the files into a serving container, serve
them over HTTP, and download a published release into a folder a serving container mounts
read-only (every file checked against its sha256; the checks and the writing are
tuner.files.pull's, the HTTP is urllib's)."""

from __future__ import annotations

import json
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any
from urllib.error import HTTPError, URLError
from urllib.parse import quote
from urllib.request import urlopen

import typer

from db import repo
from tuner.cli.errors import fail
from tuner.cli.export import AllowPartialOpt, AllowStaleOpt, device_store
from tuner.cli.options import DbOpt, DeviceOpt, EngineOpt, TrialsKernelOpt
from tuner.cli.output import out_folder, plain
from tuner.cli.store import no_store_line, open_db, sqlite_missing, store_url
from tuner.files.device import device_mounts
from tuner.files.mounts import DEFAULT_HOST_DIR, MountFormat
from tuner.files.provenance import installed_triton
from tuner.files.pull import (
    PullError,
    choose_release,
    release_tuned,
    replace_folder,
    version_mismatch,
)
from tuner.inputs.backends import device_advice
from tuner.kernels.source import vllm_version

FormatOpt = Annotated[MountFormat, typer.Option("--format", help="Mounts, or (-pull) a recipe.")]
ServerOpt = Annotated[str | None, typer.Option(help="-pull: the service's URL as pods reach it.")]
ReleaseOpt = Annotated[int | None, typer.Option("--release", min=1, help="[default: the newest]")]
HostDirOpt = Annotated[str, typer.Option(help="The serving host's folder of the exported files.")]


def mounts(
    device: DeviceOpt,
    engine_name: EngineOpt = "vllm",
    fmt: FormatOpt = "docker",
    server: ServerOpt = None,
    release: ReleaseOpt = None,
    host_dir: HostDirOpt = DEFAULT_HOST_DIR,
    allow_partial: AllowPartialOpt = False,
    allow_stale: AllowStaleOpt = False,
    kernel: TrialsKernelOpt = "auto",
    db: DbOpt = None,
) -> None:
    """Print read-only mounts of each config file of a device in the store into the engine's
    config folder, or (k8s-pull, compose-pull) a recipe that pulls a release of them first."""
    if fmt.endswith("-pull") and server is None:
        raise fail(f"--format {fmt} needs --server, the tuner service's URL")
    store, device_name = device_store(db, device)
    try:
        with repo.session_scope(store) as session:
            text = device_mounts(
                session,
                device_name,
                fmt=fmt,
                engine=engine_name,
                host_dir=host_dir,
                server=server_url(server) if server else "",
                release=release,
                allow_partial=allow_partial,
                allow_stale=allow_stale,
                kernel=kernel,
            )
    except LookupError as exc:
        raise fail(str(exc), 1) from None
    except ValueError as exc:
        raise fail(str(exc)) from None
    typer.echo(text, nl=False)


def serve(
    db: DbOpt = None,
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to bind.")] = 8000,
    create_store: Annotated[
        bool, typer.Option("--create-store", help="Create the store if its file is absent.")
    ] = False,
) -> None:
    """Serve the merged config files over HTTP (FastAPI under uvicorn).

    The store must exist (`tuner sweep` or `tuner import` creates it) unless --create-store:
    a --db that names no SQLite file is refused in one line, exit 2, as `tuner status`
    refuses it.
    """
    # The HTTP service's stack loads only to serve: every other command starts without it.
    import uvicorn
    from pydantic import ValidationError

    from api.app import create_app
    from api.settings import Settings

    url = store_url(db)
    if not create_store and sqlite_missing(url):
        raise fail(f"{no_store_line(url)}; or --create-store to serve an empty one")
    url, store = open_db(url)
    store.dispose()  # checked here; the app opens its own pool
    try:
        settings = Settings(db_url=url, host=host, port=port)
    except ValidationError as exc:  # a bad TUNER_* variable
        error = exc.errors()[0]
        raise fail(str(error.get("ctx", {}).get("error") or error["msg"])) from None
    _check_port_free(host, port)
    if settings.api_token is None:
        typer.echo("note: TUNER_API_TOKEN is unset or blank: write routes answer 403", err=True)
    uvicorn.run(create_app(settings), host=host, port=port)


def _check_port_free(host: str, port: int) -> None:
    """Bind the address once, as uvicorn will, so that a busy port is one line (exit 2), not
    uvicorn's exit 3."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as exc:
        raise fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


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
            detail = json.loads(exc.read())["detail"]
        except (ValueError, KeyError, TypeError):
            detail = "no detail: not the tuner service's answer (check --server)"
        raise OSError(f"HTTP {exc.code} from {url}: {detail}") from None
    except URLError as exc:  # no answer at all: refused, unknown host, timed out
        reason = getattr(exc.reason, "strerror", None) or exc.reason
        raise OSError(f"cannot reach {url}: {reason}") from None


def server_url(server: str) -> str:
    """--server checked (an http:// or https:// URL, else one line, exit 2), without a
    trailing slash."""
    if not server.startswith(("http://", "https://")):
        raise fail(f"--server must be an http:// or https:// URL, got {server!r}")
    return server.rstrip("/")


PullServerOpt = Annotated[str, typer.Option("--server", help="The service's URL (http://...).")]
OutOpt = Annotated[Path, typer.Option(help="The folder to fill (the previous pull's files go).")]


def pull(
    server: PullServerOpt,
    device: DeviceOpt,
    out: OutOpt,
    release: ReleaseOpt = None,
    engine_name: EngineOpt = "vllm",
) -> None:
    """Download a published release of a device's config files into a folder.

    Every file is checked against the release's sha256 before anything is written; then all
    are put in place (each renamed whole into the folder) and a marker names the release.

    Where Triton or vLLM is importable here and differs from what the release's winners were
    timed with, one warning line says so.

    Exit codes: 0 done; 1 the server cannot answer, the release does not exist or a file's
    bytes do not match (the folder is untouched); 2 bad input.
    """
    out_folder(out)
    base = server_url(server)
    chosen = _chosen(base, device, release)
    number = chosen["number"]
    contents = _download(base, chosen)
    try:
        written, removed = replace_folder(out, chosen, engine_name, contents)
    except OSError as exc:
        raise fail(f"{out}: cannot write: {exc.strerror or exc}", 1) from None
    except PullError as exc:
        raise fail(str(exc), 1) from None
    gone = f"; removed {len(removed)} file(s) of the previous release" if removed else ""
    plain(
        f"pulled {chosen['device_name']} release {number} into {out}: {len(written)} file(s), "
        f"sha256 checked{gone}"
    )
    if engine_name == "vllm":
        # Whether vLLM reads the files on the device the release was tuned on.
        capabilities = release_tuned(chosen, "compute_capability")
        for line in device_advice(chosen["device_name"], capabilities).lines():
            plain(line)


def _chosen(base: str, device: str, release: int | None) -> Mapping[str, Any]:
    """The release to pull, after one warning line when the Triton or vLLM here differs from
    the release's."""
    url = f"{base}/devices/{quote(device, safe='')}/releases"
    try:
        chosen = choose_release(json.loads(fetch(url)), device, release)
    except (OSError, ValueError, PullError) as exc:
        raise fail(str(exc), 1) from None
    mismatch = version_mismatch(chosen, triton=installed_triton(), vllm=vllm_version())
    if mismatch is not None:
        typer.echo(mismatch, err=True)
    return chosen


def _download(base: str, chosen: Mapping[str, Any]) -> dict[str, bytes]:
    """File name -> the bytes of each file of the release (`replace_folder` checks them); exit 1
    with one line when one cannot be fetched."""
    name, number = quote(chosen["device_name"], safe=""), chosen["number"]
    contents = {}
    try:
        for file in chosen["files"]:
            file_name = file["file_name"]
            url = f"{base}/devices/{name}/configs/{quote(file_name, safe='')}?release={number}"
            contents[file_name] = fetch(url)
    except OSError as exc:
        raise fail(f"{exc}; nothing written", 1) from None
    return contents
