"""`tuner pull` against the service (in-process): a release lands in a folder byte for byte,
a second pull of it does nothing, a wrong byte writes nothing, a pinned release stays pinned;
`tuner mounts --format k8s-pull|compose-pull` recipes."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from pathlib import Path
from urllib.parse import unquote

import pytest
import yaml
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from api.app import create_app
from api.settings import Settings
from tests.storefill import DEFAULT, FAST, SLOW, TRITON, fill
from tuner.cli import pull as pull_module
from tuner.cli.app import app
from tuner.files.format import dump_config_file
from tuner.files.pull import MARKER
from tuner.kernels.dense.family import config_file_name

runner = CliRunner()
SERVER = "http://tuner:8000"
A = config_file_name(576, 7168, "NVIDIA_L20")
B = config_file_name(5120, 3072, "NVIDIA_L20")
PLAN = {
    (576, 7168, 1): [(DEFAULT, True, "ok", 10.0), (FAST, False, "ok", 6.0)],
    (576, 7168, 16): [(DEFAULT, True, "ok", 10.0), (SLOW, False, "ok", 12.0)],
}


def invoke(*args: str):
    return runner.invoke(app, list(args))


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A store with release 1 (file A) and release 2 (A and an imported B), and `fetch`
    answered by the app in-process; yields (client, calls, tamper): `tamper` maps a file name
    to bytes served instead of its own."""
    db = f"sqlite:///{tmp_path / 'tuner.db'}"
    fill(db, PLAN, m_values=(1, 16))
    assert invoke("publish", "--device", "L20", "--db", db).exit_code == 0
    shipped = tmp_path / B
    shipped.write_text(dump_config_file({1: FAST}))
    assert invoke("import", str(shipped), "--db", db, "--no-check").exit_code == 0  # release 2
    calls: list[str] = []
    tamper: dict[str, bytes] = {}
    with TestClient(create_app(Settings(db_url=db))) as client:

        def fetch(url: str) -> bytes:
            assert url.startswith(SERVER)
            calls.append(url[len(SERVER) :])
            response = client.get(url[len(SERVER) :])
            if response.status_code != 200:
                raise OSError(
                    f"HTTP {response.status_code} from {url}: {response.json()['detail']}"
                )
            for name, body in tamper.items():
                if name in unquote(url):
                    return body
            return response.content

        monkeypatch.setattr(pull_module, "fetch", fetch)
        yield client, calls, tamper


def test_pull_the_newest_then_pin_the_first(served, tmp_path: Path) -> None:
    client, calls, _ = served
    out = tmp_path / "configs"
    first = invoke("pull", "--server", SERVER, "--device", "L20", "--out", str(out))
    assert first.exit_code == 0, first.output
    assert first.stdout.splitlines() == [
        f"pulled NVIDIA_L20 release 2 into {out}: 2 file(s), sha256 checked",
        "NVIDIA_L20 is sm89 (compute capability 8.9, from its trials in the store).",
        "vLLM 0.33.0's default kernel for block-FP8 linear layers there is Marlin (weight-only "
        "FP8, W8A16): these files are NOT read with default settings.",
        "To have them read, start vLLM with --linear-backend triton (or "
        'linear_backend_per_quant={"fp8_block_w8a8": "triton"}); VLLM_BATCH_INVARIANT=1 ignores '
        "the files. Measure first: tuner compare times the tuned Triton kernel against the "
        "default kernels on this GPU.",
    ]
    served_a = client.get(f"/devices/NVIDIA_L20/configs/{A}?release=2").content
    assert (out / A).read_bytes() == served_a
    assert json.loads((out / B).read_text()) == {"1": FAST}
    marker = json.loads((out / MARKER).read_text())
    assert (marker["release"], marker["files"][A]) == (2, hashlib.sha256(served_a).hexdigest())
    calls.clear()
    again = invoke("pull", "--server", SERVER, "--device", "L20", "--out", str(out))
    assert again.stdout == f"{out} already holds NVIDIA_L20 release 2; nothing to do\n"
    assert calls == ["/devices/L20/releases"]  # no file downloaded
    pinned = invoke(
        "pull", "--server", SERVER, "--device", "L20", "--out", str(out), "--release", "1"
    )
    assert pinned.exit_code == 0, pinned.output
    assert pinned.stdout.splitlines()[0].endswith(
        "1 file(s), sha256 checked; removed 1 file(s) of the previous release"
    )
    assert sorted(p.name for p in out.iterdir()) == sorted([A, MARKER])


def test_a_wrong_byte_writes_nothing(served, tmp_path: Path) -> None:
    _, _, tamper = served
    tamper[B] = b'{"1": {}}\n'
    out = tmp_path / "configs"
    result = invoke("pull", "--server", SERVER, "--device", "L20", "--out", str(out))
    assert result.exit_code == 1
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: {B}: sha256 ") and line.endswith("; nothing written")
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--release", "9"], 1, "error: L20 has no release 9; releases: 1, 2"),
        (["--device", "H200"], 1, "error: HTTP 404 from http://tuner:8000/devices/H200/releases"),
    ],
)
def test_missing_releases_are_one_line(served, tmp_path: Path, args, code, message) -> None:
    base = ["pull", "--server", SERVER, "--device", "L20", "--out", str(tmp_path / "c")]
    if "--device" in args:
        base[4] = args[1]
        args = []
    result = invoke(*base, *args)
    assert result.exit_code == code
    assert result.stderr.startswith(message)


def test_bad_server_is_exit_2(tmp_path: Path) -> None:
    result = invoke("pull", "--server", "ftp://x", "--device", "L20", "--out", str(tmp_path))
    assert result.exit_code == 2
    assert (
        result.stderr.strip() == "error: --server must be an http:// or https:// URL, got 'ftp://x'"
    )


def test_pull_recipes_pin_the_release(served) -> None:
    site = "/usr/local/lib/python3.12/dist-packages"
    target = f"{site}/vllm/model_executor/layers/quantization/utils/configs"
    k8s = invoke(
        "mounts", "--device", "L20", "--format", "k8s-pull", "--server", SERVER, "--release", "1"
    )
    assert k8s.exit_code == 0, k8s.output
    lines = k8s.stdout.splitlines()
    assert lines[0].startswith("# NVIDIA_L20 release 1 (1 file(s), content ")
    pod = yaml.safe_load(k8s.stdout)
    assert pod["initContainers"][0]["command"] == [
        *("tuner", "pull", "--server", "http://tuner:8000", "--device", "NVIDIA_L20"),
        *("--release", "1", "--engine", "vllm", "--out", "/configs"),
    ]
    assert (
        pod["volumeMounts"][0] | {"mountPath": f"{target}/{A}", "subPath": A}
        == (pod["volumeMounts"][0])
    )
    compose = invoke("mounts", "--device", "L20", "--format", "compose-pull", "--server", SERVER)
    assert compose.exit_code == 0, compose.output
    serving = yaml.safe_load(compose.stdout)["services"]["vllm"]
    assert serving["depends_on"]["blockfp8-pull"] == {"condition": "service_completed_successfully"}
    assert [v["volume"]["subpath"] for v in serving["volumes"]] == sorted([A, B])  # release 2
    missing = invoke("mounts", "--device", "L20", "--format", "k8s-pull")
    assert missing.exit_code == 2
    assert (
        missing.stderr.strip() == "error: --format k8s-pull needs --server, the tuner service's URL"
    )


def test_pull_warns_when_the_triton_here_is_not_the_releases_and_strict_refuses(
    served, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client, _, _ = served
    summary = client.get("/devices/L20/releases").json()[0]["summary"]
    assert summary["versions"] == {
        "torch": ["2.11.0"],
        "triton": [TRITON],
        "vllm": [],
        "kernel_source": ["builtin"],
    }
    readme = (
        zipfile.ZipFile(io.BytesIO(client.get("/devices/L20/configs.zip?release=2").content))
        .read("README.txt")
        .decode()
    )
    assert readme.splitlines()[2] == (
        f"Tuned with torch 2.11.0, triton {TRITON}, kernels of "
        "builtin (serve with the same Triton and vLLM)."
    )
    out = tmp_path / "configs"
    same = invoke("pull", "--server", SERVER, "--device", "L20", "--out", str(out))
    assert same.exit_code == 0 and "warning" not in same.stderr
    real = pull_module._installed
    monkeypatch.setattr(
        pull_module, "_installed", lambda name: "2.1.0" if name == "triton" else real(name)
    )
    warned = invoke("pull", "--server", SERVER, "--device", "L20", "--out", str(tmp_path / "w"))
    assert warned.exit_code == 0
    assert warned.stderr == (
        f"warning: release 2 was tuned elsewhere: triton 2.1.0 here, "
        f"{TRITON} in the release (configs are facts about one Triton "
        "and kernel)\n"
    )
    strict = invoke(
        "pull", "--server", SERVER, "--device", "L20", "--out", str(tmp_path / "s"), "--strict"
    )
    assert strict.exit_code == 1
    assert strict.stderr.startswith("error: release 2 was tuned elsewhere: triton 2.1.0 here")
    assert strict.stderr.endswith("; --strict: nothing written\n")
    assert not (tmp_path / "s").exists()


def test_a_server_that_does_not_answer_is_one_line_naming_it(tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:  # a port nothing listens on: bound, never listening
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        result = runner.invoke(
            app,
            [
                "pull",
                "--server",
                f"http://127.0.0.1:{port}",
                "--device",
                "L20",
                "--out",
                str(tmp_path / "out"),
            ],
        )
    assert result.exit_code == 1
    assert result.stderr.strip() == (
        f"error: cannot reach http://127.0.0.1:{port}/devices/L20/releases: Connection refused"
    )
    assert not (tmp_path / "out").exists()


def _unreachable(monkeypatch: pytest.MonkeyPatch, folder: Path, why: str) -> None:
    """No server answers (`why`), and no store here: no ./tuner.db, no TUNER_DB_URL."""

    def fetch(url: str) -> bytes:
        raise OSError(f"cannot reach {url}: {why}")

    monkeypatch.setattr(pull_module, "fetch", fetch)
    monkeypatch.chdir(folder)
    monkeypatch.delenv("TUNER_DB_URL", raising=False)


def test_an_in_cluster_server_name_without_a_pinned_release_here_says_both_ways_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _unreachable(monkeypatch, tmp_path, "Name or service not known")
    newest = invoke("mounts", "--device", "L20", "--format", "k8s-pull", "--server", SERVER)
    assert (newest.exit_code, newest.stdout) == (1, "")
    assert newest.stderr == (
        "error: cannot reach http://tuner:8000/devices/L20/releases: Name or service not known; "
        "with --release N the recipe is made from the store here (--db) without asking the "
        "server; or ask the service in the cluster: kubectl port-forward svc/tuner 8000:8000, "
        "then curl 'http://127.0.0.1:8000/devices/L20/mounts?format=k8s-pull&server="
        "http://tuner:8000'\n"
    )
    pinned = invoke(
        "mounts",
        "--device",
        "L20",
        "--format",
        "compose-pull",
        "--server",
        SERVER,
        "--release",
        "2",
    )
    assert pinned.exit_code == 1
    assert pinned.stderr.startswith(
        "error: cannot reach http://tuner:8000/devices/L20/releases: "
        "Name or service not known; the store here holds no "
        "release 2 of L20; or ask the service in the cluster"
    )
    assert pinned.stderr.endswith(
        "mounts?format=compose-pull&server=http://tuner:8000&release=2'\n"
    )


def test_an_unreachable_address_gets_no_kubernetes_service_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _unreachable(monkeypatch, tmp_path, "Connection refused")
    for server in ("http://127.0.0.1:9", "http://localhost:9"):
        done = invoke("mounts", "--device", "L20", "--format", "k8s-pull", "--server", server)
        assert (done.exit_code, done.stdout) == (1, "")
        assert done.stderr == (
            f"error: cannot reach {server}/devices/L20/releases: Connection refused; with "
            "--release N the recipe is made from the store here (--db) without asking the "
            f"server; or start the service at {server} (tuner serve --port 9)\n"
        )


def test_a_loopback_server_in_a_pull_recipe_is_named_for_what_it_is(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'tuner.db'}"
    fill(db, PLAN, m_values=(1, 16))
    assert invoke("publish", "--device", "L20", "--db", db).exit_code == 0
    for server in ("http://127.0.0.1:8000", "http://localhost:8000"):
        done = invoke(
            "mounts",
            "--device",
            "L20",
            "--format",
            "k8s-pull",
            "--server",
            server,
            "--release",
            "1",
            "--db",
            db,
        )
        assert done.exit_code == 0, done.output
        assert done.stderr.splitlines()[-1] == (
            f"note: the recipe's containers pull from {server}, which inside a container or pod "
            "is itself, not this host: give --server as they reach the service (e.g. "
            "http://tuner:8000)"
        )
    cluster = invoke(
        "mounts",
        "--device",
        "L20",
        "--format",
        "k8s-pull",
        "--server",
        SERVER,
        "--release",
        "1",
        "--db",
        db,
    )
    assert "inside a container" not in cluster.stderr


def test_an_answer_that_is_not_the_tuner_services_says_so() -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    class NotTheTuner(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), NotTheTuner)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_port}/devices/L20/releases"
    try:
        with pytest.raises(OSError) as raised:
            pull_module.fetch(url)
    finally:
        server.shutdown()
    assert str(raised.value) == (
        f"HTTP 404 from {url}, with no detail: not the tuner service's answer (check --server)"
    )
