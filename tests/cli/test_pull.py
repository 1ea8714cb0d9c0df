"""`tuner pull` against the service (in-process): a release lands in a folder byte for byte,
a wrong byte writes nothing, a pinned release stays pinned; `tuner mounts --format
k8s-pull|compose-pull` recipes of the store's newest release.

`tuner publish`: a device's merged files frozen as numbered releases in the store, their
bytes exactly those of `tuner export`, identical content stored once, also when several
processes publish at the same moment (on a SQLite file and on PostgreSQL)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import socket
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from urllib.parse import unquote

import pytest
import yaml

from db.files import blob, get_release, list_releases
from tests.cli.common import PLAN, invoke, ok, one_line_error, service, session_on
from tests.cli.robust import start_tuner, store_rows
from tests.storefill import DEFAULT, FAST, SLOW, TRITON, fill, reset_postgresql
from tuner.cli import serving as pull_module
from tuner.files.format import dump_config_file
from tuner.files.pull import MARKER
from tuner.kernels.dense.family import config_file_name

SERVER = "http://tuner:8000"
A = config_file_name(576, 7168, "NVIDIA_L20")
B = config_file_name(5120, 3072, "NVIDIA_L20")


def tuner(command: str, code: int | None = None):
    """`tuner` with the words of `command` (no word holds a space), exiting `code` if given."""
    return invoke(*command.split(), code=code)


@pytest.fixture
def served(tmp_path: Path, db: str, monkeypatch: pytest.MonkeyPatch):
    """A store with release 1 (file A) and release 2 (A and an imported B), and `fetch`
    answered by the app in-process; yields (client, tamper): `tamper` maps a file name
    to bytes served instead of its own."""
    fill(db, PLAN, m_values=(1, 16))
    tuner(f"publish --device L20 --db {db}", code=0)  # release 1
    (tmp_path / B).write_text(dump_config_file({1: FAST}))
    tuner(f"import {tmp_path / B} --db {db} --no-check", code=0)  # release 2
    tamper: dict[str, bytes] = {}
    with service(db) as client:

        def fetch(url: str) -> bytes:
            response = client.get(url.removeprefix(SERVER))
            if response.status_code != 200:
                raise OSError(
                    f"HTTP {response.status_code} from {url}: {response.json()['detail']}"
                )
            return next((b for name, b in tamper.items() if name in unquote(url)), response.content)

        monkeypatch.setattr(pull_module, "fetch", fetch)
        yield client, tamper


def test_pull_the_newest_then_pin_the_first_as_recipes_pin_the_newest(served, tmp_path, db) -> None:
    client, _ = served
    out = tmp_path / "configs"
    first = tuner(f"pull --server {SERVER} --device L20 --out {out}")
    # The advice lines after the first: tests/cli/test_deploy_advice.py.
    assert first.stdout.splitlines()[0] == (
        f"pulled NVIDIA_L20 release 2 into {out}: 2 file(s), sha256 checked"
    ), first.output
    served_a = client.get(f"/devices/NVIDIA_L20/configs/{A}?release=2").content
    assert (out / A).read_bytes() == served_a
    assert json.loads((out / B).read_text()) == {"1": FAST}
    marker = json.loads((out / MARKER).read_text())
    assert (marker["release"], sorted(marker["files"])) == (2, sorted([A, B]))
    pinned = tuner(f"pull --server {SERVER} --device L20 --out {out} --release 1")
    assert pinned.stdout.splitlines()[0].endswith(
        "1 file(s), sha256 checked; removed 1 file(s) of the previous release"
    ), pinned.output
    assert sorted(p.name for p in out.iterdir()) == sorted([A, MARKER])
    # The pull recipes pin the store's newest release (2; a pinned one:
    # tests/cli/test_deploy_advice.py).
    compose = tuner(f"mounts --device L20 --format compose-pull --server {SERVER} --db {db}")
    serving = yaml.safe_load(compose.stdout)["services"]["vllm"]
    assert serving["depends_on"]["blockfp8-pull"] == {"condition": "service_completed_successfully"}
    assert [v["volume"]["subpath"] for v in serving["volumes"]] == sorted([A, B])  # release 2
    missing = tuner("mounts --device L20 --format k8s-pull")
    one_line_error(missing, "--format k8s-pull needs --server, the tuner service's URL")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (f"--device L20 --tamper {B}", f"error: {B}: sha256 "),
        ("--device L20 --release 9", "error: L20 has no release 9; releases: 1, 2\n"),
        ("--device H200", f"error: HTTP 404 from {SERVER}/devices/H200/releases"),
    ],
)
def test_a_bad_release_is_one_line_and_writes_nothing(served, tmp_path, args, message) -> None:
    _, tamper = served
    if "--tamper" in args:
        args, name = args.split(" --tamper ")
        tamper[name] = b'{"1": {}}\n'
    result = tuner(f"pull --server {SERVER} {args} --out {tmp_path / 'c'}", code=1)
    assert result.stderr.startswith(message) and len(result.stderr.splitlines()) == 1
    assert not (tmp_path / "c").exists()


def test_pull_warns_when_the_triton_here_is_not_the_releases(
    served, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client, _ = served
    summary = client.get("/devices/L20/releases").json()[0]["summary"]
    assert summary["versions"] == {
        "torch": ["2.11.0"],
        "triton": [TRITON],
        "vllm": [],
        "kernel_source": ["builtin"],
    }
    archive = zipfile.ZipFile(io.BytesIO(client.get("/devices/L20/configs.zip?release=2").content))
    assert archive.read("README.txt").decode().splitlines()[2] == (
        f"Tuned with torch 2.11.0, triton {TRITON}, kernels of builtin (serve with the same "
        "Triton and vLLM)."
    )
    same = tuner(f"pull --server {SERVER} --device L20 --out {tmp_path / 'same'}", code=0)
    assert "warning" not in same.stderr
    monkeypatch.setattr(pull_module, "installed_triton", lambda: "2.1.0")
    warned = tuner(f"pull --server {SERVER} --device L20 --out {tmp_path / 'w'}", code=0)
    assert warned.stderr == (
        f"warning: release 2 was tuned elsewhere: triton 2.1.0 here, {TRITON} in the release\n"
    )


def test_an_unreachable_server_is_one_line_naming_it(tmp_path):
    with socket.socket() as sock:  # a port nothing listens on: bound, never listening
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        result = tuner(f"pull --server http://127.0.0.1:{port} --device L20 --out {tmp_path}/o")
    refused = f"cannot reach http://127.0.0.1:{port}/devices/L20/releases: Connection refused"
    one_line_error(result, refused, code=1)
    assert not (tmp_path / "o").exists()


def test_an_answer_that_is_not_the_tuner_services_says_so() -> None:
    class NotTheTuner(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), NotTheTuner)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/devices/L20/releases"
    try:
        with pytest.raises(OSError) as raised:
            pull_module.fetch(url)
    finally:
        server.shutdown()
    assert str(raised.value) == (
        f"HTTP 404 from {url}: no detail: not the tuner service's answer (check --server)"
    )


TUNED = f"; tuned with torch 2.11.0, triton {TRITON}, kernels of builtin"
UNCHANGED = "NVIDIA_L20: files unchanged since release 1; no new release" + TUNED
PG_URL = os.environ.get("TUNER_TEST_PG_URL")


def publish(db: str, device: str = "L20"):
    return invoke("publish", "--device", device, "--db", db)


def count(url: str, table: str) -> int:
    return store_rows(url, f"SELECT count(*) FROM {table}")[0][0]


def test_publish_freezes_the_exported_bytes_once(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 't.db'}"
    fill(db, PLAN, m_values=(1, 16))
    first = publish(db)
    assert first.stdout.startswith("published NVIDIA_L20 release 1: 1 file(s), content ")
    assert first.stdout.strip().endswith(TUNED)
    assert publish(db, "NVIDIA_L20").stdout.strip() == UNCHANGED
    out = tmp_path / "o"
    ok("export", "--device", "L20", "--out", str(out), "--db", db)
    expected = (out / A).read_bytes()
    with session_on(db) as session:
        release = get_release(session, device_name="NVIDIA_L20")
        assert [r.number for r in list_releases(session, device_name="NVIDIA_L20")] == [1]
        assert release.reason == "tuner publish"
        assert [(f.file_name, f.sha256, f.size) for f in release.files] == [
            (A, hashlib.sha256(expected).hexdigest(), len(expected))
        ]
        assert release.files[0].detail["m_keys"] == [1, 16]
        assert blob(session, sha256=release.files[0].sha256) == expected
        archive = zipfile.ZipFile(io.BytesIO(blob(session, sha256=release.archives["vllm"])))
        assert archive.read(A) == expected
        assert release.summary["scope"]["allow_stale"] is False
        tuned = [(t["gpu_name"], t["driver"], t["winners"]) for t in release.summary["tuned_with"]]
        assert tuned == [("NVIDIA L20", "580.1", 2)]
    # one file blob and two zip blobs (vllm, sglang), however often it is published
    assert (count(db, "blobs"), count(db, "releases")) == (3, 1)
    # A new winner makes release 2 and keeps release 1.
    fill(
        db,
        {(576, 7168, 32): [(DEFAULT, True, "ok", 10.0), (SLOW, False, "ok", 5.0)]},
        m_values=(32,),
    )
    result = publish(db)
    assert result.stdout.startswith("published NVIDIA_L20 release 2: 1 file(s)"), result.output
    with session_on(db) as session:
        one, two = (get_release(session, device_name="NVIDIA_L20", number=n) for n in (1, 2))
        keys = (one.files[0].detail["m_keys"], two.files[0].detail["m_keys"])
        assert keys == ([1, 16], [1, 16, 32]) and one.files[0].sha256 != two.files[0].sha256


def test_nothing_to_publish_is_exit_1(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 't.db'}"
    fill(db, {(576, 7168, 1): [(DEFAULT, True, "ok", 10.0)]}, m_values=(1, 16))
    result = publish(db)
    one_line_error(
        result,
        "nothing to publish for NVIDIA_L20: no complete file; e.g. N=576, K=7168: no winner yet "
        "for M=16",
        code=1,
    )
    assert count(db, "releases") == 0


POSTGRESQL = pytest.mark.skipif(
    not PG_URL,
    reason="TUNER_TEST_PG_URL is not set (a scratch PostgreSQL database, as .ci/run sets up)",
)


@pytest.mark.parametrize(
    "url", [None, pytest.param(PG_URL, marks=POSTGRESQL)], ids=["sqlite", "postgresql"]
)
def test_publish_at_once_makes_one_release(tmp_path: Path, url: str | None) -> None:
    if url is None:
        url = f"sqlite:///{tmp_path / 'tuner.db'}"
    else:
        reset_postgresql(url)
    fill(url, PLAN, m_values=(1, 16))
    command = ("publish", "--device", "L20", "--db", url)
    processes = [start_tuner(*command, cwd=tmp_path) for _ in range(3)]
    results = [(p.communicate(timeout=120), p.returncode) for p in processes]
    assert [code for _, code in results] == [0, 0, 0], results
    lines = sorted(out.strip() for (out, _), _ in results)
    assert lines[:-1] == [UNCHANGED] * 2, lines
    assert lines[-1].startswith("published NVIDIA_L20 release 1: 1 file(s), content "), lines
    assert count(url, "releases") == 1
