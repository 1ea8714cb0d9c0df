"""`tuner mounts`, `tuner serve` and `tuner pull`: mount the files into a serving container, serve
them over HTTP, and download a published release into a folder a serving container mounts
read-only (every file checked against its sha256; the checks and the writing are
tuner.files.pull's, the HTTP is urllib's)."""

from __future__ import annotations

import errno
import json
import os
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
from tuner.cli.export import (
    AllowPartialOpt,
    AllowStaleOpt,
    EngineVersionOpt,
    TritonVersionOpt,
    device_store,
)
from tuner.cli.options import (
    DbOpt,
    DeviceOpt,
    EngineOpt,
    TrialsKernelOpt,
)
from tuner.cli.output import out_folder, plain
from tuner.cli.store import (
    no_store_line,
    open_db,
    sqlite_missing,
    store_files,
    store_url,
)
from tuner.files.device import StoreFiles
from tuner.files.format import parse_config_file
from tuner.files.mounts import (
    DEFAULT_HOST_DIR,
    DEFAULT_SITE_PACKAGES,
    MountFormat,
    MountRequest,
    check_site_packages,
    config_files_in,
    render_mounts,
    store_request,
)
from tuner.files.provenance import installed_triton
from tuner.files.pull import (
    PULL_FORMATS,
    PullError,
    choose_release,
    holds,
    release_entry,
    release_tuned,
    render_pull_recipe,
    replace_folder,
    version_mismatch,
    wanted_files,
)
from tuner.inputs.backends import device_advice
from tuner.inputs.devices import device_among
from tuner.kernels.registry import family_of_file
from tuner.kernels.source import vllm_version

SitePackagesOpt = Annotated[
    str | None,
    typer.Option(
        help="The engine's site-packages folder in the container [default: vLLM image "
        f"{DEFAULT_SITE_PACKAGES['vllm']}; SGLang image {DEFAULT_SITE_PACKAGES['sglang']}].",
    ),
]
FormatOpt = Annotated[
    MountFormat,
    typer.Option(
        "--format",
        help="docker run flags, a compose volumes list, a Kubernetes ConfigMap and mounts; or "
        "k8s-pull / compose-pull: `tuner pull` of a pinned release from --server into a volume "
        "before the engine starts.",
    ),
]
ServerOpt = Annotated[
    str | None,
    typer.Option(
        help="With k8s-pull or compose-pull: the tuner service's URL, as the pods reach it (a "
        "name only the cluster resolves is fine with --release)."
    ),
]
ReleaseOpt = Annotated[
    int | None,
    typer.Option(
        "--release",
        min=1,
        help="The release to pull (mounts: with k8s-pull or compose-pull, to pin; read from the "
        "store here (--db) when it holds it, without asking --server) [default: the newest].",
    ),
]
FilesOpt = Annotated[
    Path | None,
    typer.Option(
        help="Folder of exported files to mount [default: the device's files in the store, "
        "mounted from $PWD/configs]."
    ),
]


def mounts(
    device: DeviceOpt,
    engine_name: EngineOpt = "vllm",
    site_packages: SitePackagesOpt = None,
    fmt: FormatOpt = "docker",
    server: ServerOpt = None,
    release: ReleaseOpt = None,
    files: FilesOpt = None,
    allow_partial: AllowPartialOpt = False,
    allow_stale: AllowStaleOpt = False,
    kernel: TrialsKernelOpt = "auto",
    db: DbOpt = None,
    engine_version: EngineVersionOpt = None,
    triton_version: TritonVersionOpt = None,
) -> None:
    """Print read-only mounts of each config file into the engine's config folder."""
    site = site_packages or DEFAULT_SITE_PACKAGES[engine_name]
    if fmt in PULL_FORMATS:
        versions = {"engine_version_": engine_version, "triton_version": triton_version}
        return _pull_recipe(
            fmt, device, server, release, db, engine=engine_name, site_packages=site, **versions
        )
    given: dict[str, Any] = {
        "engine": engine_name,
        "site_packages": site,
        "fmt": fmt,
        "engine_version": engine_version,
    }
    triton = (triton_version, "--triton-version")
    if files is not None:
        fields = _folder_files(files, device, engine_name)
        request = MountRequest(**fields, **given, triton_version=triton[0], triton_from=triton[1])
    else:
        read = _store_files(device, engine_name, (allow_partial, allow_stale, kernel), db)
        request = store_request(read, triton, host_dir=DEFAULT_HOST_DIR, **given)
    try:
        typer.echo(render_mounts(request), nl=False)
    except ValueError as exc:
        raise fail(str(exc)) from None
    if files is None:
        _export_note(DEFAULT_HOST_DIR, request.device_name, engine_name)


def _export_note(folder: str, device_name: str, engine_name: str) -> None:
    """Tell, on stderr, how the files the mounts read from the store get to `folder`."""
    sglang = " --engine sglang" if engine_name == "sglang" else ""
    typer.echo(
        f"note: the mounts read the files from {folder}/ on the serving host: `tuner export "
        f"--device {device_name} --out {folder.removeprefix('$PWD/')}/{sglang}` "
        "writes them (or unzip the release's configs.zip there)",
        err=True,
    )


def _folder_files(folder: Path, device: str, engine: str) -> dict[str, Any]:
    """The mounts' fields of one device's config files in `folder`: its key, the files
    (name -> text) and the folder; each file is read as the engine reads it, one it could not
    read refused in one line. SGLang 0.5.23's get_moe_configs reads every key as an M, so a
    file with `"triton_version"` (`tuner export --engine vllm` writes it) is refused for SGLang."""
    try:
        entries = [p.name for p in folder.iterdir() if p.is_file()]
    except OSError as exc:
        raise fail(f"{folder}: cannot list: {exc.strerror or exc}") from None
    seen = set()
    for name in entries:
        try:
            seen.add(family_of_file(name).files.parse_file_name(name)[1])
        except ValueError:
            continue
    try:
        device_name = device_among(device, seen, new=True)
        names = config_files_in(entries, device_name, engine)
    except ValueError:
        device_name, names = device, []
    if not names:
        raise fail(
            f"{folder}: no config files for --device {device}; devices there: "
            f"{', '.join(sorted(seen)) or 'none'}"
        )
    contents = {}
    for name in names:
        try:
            contents[name] = text = (folder / name).read_text()
            parse_config_file(text, source=str(folder / name))
        except (OSError, UnicodeDecodeError) as exc:
            raise fail(f"{folder / name}: cannot read: {exc}") from None
        except ValueError as exc:
            raise fail(str(exc)) from None
        moe = family_of_file(name).files.file_triton_version
        if engine == "sglang" and moe and "triton_version" in json.loads(text):
            raise fail(
                f'{folder / name}: its "triton_version" key makes SGLang\'s get_moe_configs '
                "fail (it reads every key as an M); write the files with `tuner export "
                "--engine sglang`"
            )
    return {
        "device_name": device_name,
        "file_names": tuple(names),
        "contents": contents,
        "host_dir": str(folder.resolve()),
    }


def _store_files(
    device: str, engine: str, kept: tuple[bool, bool, str], db: str | None
) -> StoreFiles:
    """A device's merged files in the store (`kept`: --allow-partial, --allow-stale,
    --kernel); exit 2 when there is none."""
    allow_partial, allow_stale, kernel = kept
    store, device_name = device_store(db, device)
    read = store_files(
        store,
        device_name,
        out_dtype=None,
        allow_stale=allow_stale,
        allow_partial=allow_partial,
        engine_name=engine,
        kernel=kernel,
    )
    if not read.files.files:
        stale = "; --allow-stale also uses stale trials" if read.view.scope.stale_trials else ""
        raise fail(
            f"{device_name} has no complete file yet; --allow-partial mounts what there is{stale}"
        )
    return read


def _pull_recipe(
    fmt: str, device: str, server: str | None, release: int | None, db: str | None, **given: Any
) -> None:
    """Print a `tuner pull` recipe for a release (tuner.files.pull). A pinned release is read
    from the store here when it holds it, so that --server may be a name only the pods resolve
    (http://tuner:8000); otherwise the server is asked for its releases. `given`: the engine,
    the site-packages folder, --engine-version and --triton-version."""
    if server is None:
        raise fail(f"--format {fmt} needs --server, the tuner service's URL")
    server = server_url(server)
    stored = _stored_release(db, device, release) if release is not None else None
    try:
        given["site_packages"] = check_site_packages(given["site_packages"])
        if stored is not None:
            typer.echo(
                f"note: {stored['device_name']} release {release} read from the store here "
                f"(content {stored['content_sha256'][:12]}); {server} was not asked: it "
                "must serve the same store",
                err=True,
            )
        hint = _unreachable_hint(device, release)
        chosen = stored or choose_release(releases_of(server, device, hint=hint), device, release)
        text = render_pull_recipe(
            fmt, server=server, release=chosen, triton_from="--triton-version", **given
        )
    except PullError as exc:
        raise fail(str(exc), 1) from None
    except ValueError as exc:
        raise fail(str(exc)) from None
    typer.echo(text, nl=False)


def _unreachable_hint(device: str, release: int | None) -> str:
    """What to do when --server does not answer from here: pin a release the store here holds."""
    if release is not None:
        return f"; the store here holds no release {release} of {device}"
    return (
        "; with --release N the recipe is made from the store here (--db) without asking the server"
    )


def _stored_release(db: str | None, device: str, number: int) -> dict | None:
    """Release `number` of the device from the store here, as an entry of `GET
    /devices/{d}/releases`; None when there is no store here (no --db, no $TUNER_DB_URL and no
    ./tuner.db) or it lacks that release."""
    if db is None and not os.environ.get("TUNER_DB_URL") and not Path("tuner.db").exists():
        return None
    _, store = open_db(db, must_exist=True, read_only=True)
    with repo.session_scope(store) as session:
        try:
            known = repo.list_release_device_names(session)
            name = device_among(device, known)
        except ValueError:
            return None
        info = repo.get_release(session, device_name=name, number=number)
        return None if info is None else release_entry(info)


def serve(
    db: DbOpt = None,
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to bind.")] = 8000,
    create_store: Annotated[
        bool,
        typer.Option(
            "--create-store",
            help="Create an empty store when the SQLite file does not exist (a fresh volume of "
            "the service's image); without it a missing store is refused, as `tuner status` "
            "refuses it.",
        ),
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
    url, store = open_db(url, read_only=True)
    store.dispose()  # checked here; the app opens its own pool
    try:
        settings = Settings(db_url=url, host=host, port=port)
    except ValidationError as exc:  # a bad TUNER_* variable
        error = exc.errors()[0]
        raise fail(str(error.get("ctx", {}).get("error") or error["msg"])) from None
    _check_port_free(host, port)
    if settings.api_token is None:
        typer.echo(
            "note: TUNER_API_TOKEN is unset or blank: write routes (POST /sweeps, POST "
            "/devices/{device_name}/imports) answer 403",
            err=True,
        )
    uvicorn.run(create_app(settings), host=host, port=port)


def _check_port_free(host: str, port: int) -> None:
    """Bind the address once, as uvicorn will, so that a busy port is one line (exit 2), not
    uvicorn's unhelpful exit 3."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise fail(
                f"port {port} on {host} is in use (another tuner serve?): pass a free "
                "--port, or stop the server that holds it"
            ) from None
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


PullServerOpt = Annotated[
    str, typer.Option("--server", help="The tuner service's URL, e.g. http://tuner:8000.")
]
OutOpt = Annotated[
    Path,
    typer.Option(
        help="The folder to fill; files of the previous pull that the release no longer has "
        "are removed."
    ),
]
StrictOpt = Annotated[
    bool,
    typer.Option(
        "--strict",
        help="Exit 1 (writing nothing) when the Triton or vLLM here differs from the release's.",
    ),
]


def pull(
    server: PullServerOpt,
    device: DeviceOpt,
    out: OutOpt,
    release: ReleaseOpt = None,
    engine_name: EngineOpt = "vllm",
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
    base, engine = server_url(server), engine_name
    chosen = _chosen(base, device, release, strict)
    name, number = chosen["device_name"], chosen["number"]
    if holds(out, chosen, engine):
        plain(f"{out} already holds {name} release {number}; nothing to do")
        return
    try:
        written, removed = replace_folder(out, chosen, engine, _download(base, chosen, engine))
    except OSError as exc:
        raise fail(f"{out}: cannot write: {exc.strerror or exc}", 1) from None
    except PullError as exc:
        raise fail(str(exc), 1) from None
    gone = f"; removed {len(removed)} file(s) of the previous release" if removed else ""
    plain(
        f"pulled {name} release {number} into {out}: {len(written)} file(s), sha256 checked{gone}"
    )
    ab = chosen.get("ab")
    plain(
        f"A/B {ab['ab_test_id']} in a real server: the release is {ab['verdict']}"
        if ab
        else "no A/B of this release yet: `tuner ab --release` measures it in your server"
    )
    if engine_name == "vllm":
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
    mismatch = version_mismatch(chosen, triton=installed_triton(), vllm=vllm_version())
    if mismatch is not None and strict:
        raise fail(mismatch.removeprefix("warning: ") + "; --strict: nothing written", 1)
    if mismatch is not None:
        typer.echo(mismatch, err=True)
    return chosen


def _download(base: str, chosen: Mapping[str, Any], engine: str) -> dict[str, bytes]:
    """File name -> the bytes of each file of the release (`replace_folder` checks them); exit 1
    with one line when one cannot be fetched."""
    name, number = quote(chosen["device_name"], safe=""), chosen["number"]
    contents = {}
    try:
        for file in wanted_files(chosen, engine):
            url = f"{base}/devices/{name}/configs/{quote(file.file_name, safe='')}?release={number}"
            contents[file.file_name] = fetch(url)
    except OSError as exc:
        raise fail(f"{exc}; nothing written", 1) from None
    return contents
