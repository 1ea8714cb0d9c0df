"""The write routes, POST /sweeps and POST /devices/{d}/imports: what they store and answer,
the same sweep as `tuner sweep --no-run`, and refusals that store nothing: no token, a bad body,
a body over the limit (refused before it is read, over real HTTP to uvicorn on loopback)."""

from __future__ import annotations

import http.client
import io
import json
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from api.app import create_app
from api.settings import Settings
from tests.db.test_files import PLAN
from tests.storefill import DEFAULT, FAST, SLOW, fill, publish, row_counts
from tuner.cli.app import app as cli_app
from tuner.core import VLLM_M_GRID
from tuner.files.format import dump_config_file
from tuner.kernels.dense.family import config_file_name

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
LIMIT = 64 * 1024  # the uvicorn service's TUNER_MAX_BODY_BYTES
NAME = config_file_name(576, 7168, "NVIDIA_L20")
SHIPPED = dump_config_file({1: SLOW, 2048: SLOW, 4096: FAST})
SWEEP = {"device_name": "NVIDIA_L20", "model": "tiny", "m_values": [16, 1, 16], "seed": 7}
NEEDS_TOKEN = "a valid 'Authorization: Bearer <token>' header is required"
TOO_LARGE = f"request body over {LIMIT} bytes (the service's TUNER_MAX_BODY_BYTES)"


def _filled(folder: Path) -> str:
    url = f"sqlite:///{folder / 'tuner.db'}"
    fill(url, PLAN, m_values=(1, 16))
    publish(url)
    return url


@pytest.fixture
def store(tmp_path: Path) -> str:
    """A store of one's own, for a test that writes."""
    return _filled(tmp_path)


@pytest.fixture(scope="module")
def kept(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The store the refusal tests share: each shows that it stays unchanged."""
    return _filled(tmp_path_factory.mktemp("kept"))


@pytest.fixture
def client(store: str) -> Iterator[TestClient]:
    with TestClient(create_app(Settings(db_url=store, api_token=TOKEN))) as test_client:
        yield test_client


@pytest.fixture
def refusing(kept: str) -> Iterator[TestClient]:
    with TestClient(create_app(Settings(db_url=kept, api_token=TOKEN))) as test_client:
        yield test_client


def test_a_sweep_is_created_once_and_read_as_the_cli_finds_it(
    client: TestClient, store: str
) -> None:
    created = client.post("/sweeps", json={**SWEEP, "strategy": "grid"}, headers=AUTH)
    assert created.status_code == 201, created.text
    body = created.json()
    assert body.pop("created_at") and body.pop("sweep_id") == 2  # the store's sweep 1 is fill's
    sweep = {"device_name": "NVIDIA_L20", "model": "tiny", "tp": 1, "strategy": "grid"}
    sweep |= {"budget": 1281, "space": "vllm", "seed": 7, "m_values": [1, 16]}
    sweep |= {"out_dtype": "bfloat16", "block_shape": [128, 128], "tasks_total": 4}
    tasks = {"tasks_pending": 4, "tasks_running": 0, "tasks_done": 0, "tasks_failed": 0}
    assert body == sweep | tasks | {"trials_total": 0, "trials_ok": 0}
    again = client.post("/sweeps", json={**SWEEP, "strategy": "grid"}, headers=AUTH)
    assert again.status_code == 200 and client.get("/sweeps/2").json() == again.json()
    default_grid = client.post(
        "/sweeps", json={"device_name": "L20", "model": "tiny"}, headers=AUTH
    )
    assert default_grid.json()["m_values"] == list(VLLM_M_GRID)  # as `tuner sweep` without --m
    args = ["sweep", "--device", "L20", "--model", "tiny", "--no-run", "--db", store]
    result = CliRunner().invoke(cli_app, args)
    assert result.exit_code == 0, result.output
    assert "sweep 3 (resumed): NVIDIA_L20, tiny TP 1, 2 shapes x 18 M" in result.output
    assert "tuner worker --device NVIDIA_L20 --sweep 3" in " ".join(result.output.split())


@pytest.mark.parametrize("spelled", ["H200", "NVIDIA H200", "nvidia_h200", "NVIDIA_H200"])
def test_a_new_device_is_named_as_the_cli_names_it(client: TestClient, spelled: str) -> None:
    response = client.post("/sweeps", json={**SWEEP, "device_name": spelled}, headers=AUTH)
    assert response.status_code == 201 and response.json()["device_name"] == "NVIDIA_H200"


@pytest.mark.parametrize(
    ("change", "detail"),
    [
        ({"model": "llama3"}, "unknown model 'llama3'; known: "),
        ({"tp": 3}, "model 'tiny' has no shapes for TP 3; listed: 1"),
        ({"strategy": "random"}, "unknown strategy 'random'; known: grid, optuna"),
        ({"device_name": "H2OO"}, "device_name 'H2OO' is not a GPU model name such as L20, H200"),
        ({"m_values": []}, ["body", "m_values"]),
        ({"m_values": [0]}, ["body", "m_values", 0]),
        ({"device_name": 'quote"d'}, ["body", "device_name"]),
        ({"model": "../../etc/passwd"}, ["body", "model"]),
        ({"seed": 2**31}, ["body", "seed"]),
        ({"out_dtype": "float32"}, ["body", "out_dtype"]),
        ({"extra": 1}, ["body", "extra"]),
    ],
)
def test_a_bad_sweep_is_422_and_stores_nothing(
    refusing: TestClient, kept: str, change: dict, detail: str | list
) -> None:
    before = row_counts(kept)
    response = refusing.post("/sweeps", json={**SWEEP, **change}, headers=AUTH)
    assert response.status_code == 422
    found = response.json()["detail"]
    assert found.startswith(detail) if isinstance(detail, str) else found[0]["loc"] == detail
    assert row_counts(kept) == before


def test_an_import_is_stored_merged_and_published(client: TestClient) -> None:
    response = client.post(
        "/devices/L20/imports",
        json={"file_name": NAME, "content": SHIPPED, "label": "vllm-0.33.0"},
        headers=AUTH,
    )
    assert response.status_code == 201, response.text
    body = response.json()
    assert (body["device_name"], body["family"], body["shape_params"], body["m_keys"]) == (
        "NVIDIA_L20",
        "dense",
        "",
        [1, 2048, 4096],
    )
    got = (body["note"], body["checked_arch"], body["coverage"]["grid_present"])
    assert got == (None, None, [1, 2048, 4096])
    assert body["coverage"]["summary"].startswith("3 of vLLM's 18 M values: 1, 2048, 4096")
    listed = client.get("/devices/NVIDIA_L20/imports").json()
    assert [(i["file_name"], i["label"]) for i in listed] == [(NAME, "vllm-0.33.0")]
    configs = client.get("/devices/L20/configs").json()  # release 2: published by the import
    (merged,) = configs["files"]
    got = (configs["release"], merged["m_keys"], merged["m_imported"])
    assert got == (2, [1, 16, 2048, 4096], [2048, 4096])
    assert "M=1: measured winner replaces the entry imported from 'vllm-0.33.0'" in merged["notes"]
    text = client.get(f"/devices/L20/configs/{NAME}").text
    assert json.loads(text) == {"1": FAST, "16": DEFAULT, "2048": SLOW, "4096": FAST}
    with zipfile.ZipFile(io.BytesIO(client.get("/devices/L20/configs.zip").content)) as opened:
        assert "  imported, not measured: M=2048, 4096" in opened.read("README.txt").decode()
    moe = "E=4,N=64,device_name=NVIDIA_L20,dtype=fp8_w8a8,block_shape=[128,128].json"
    moe_text = dump_config_file({1: SLOW, 64: FAST})
    answer = client.post(
        "/devices/L20/imports", json={"file_name": moe, "content": moe_text}, headers=AUTH
    )
    assert [answer.json()[k] for k in ("family", "shape_params", "N", "K")] == ["moe", "E=4", 64, 0]
    assert client.get(f"/devices/L20/configs/{moe}").text == moe_text
    assert "MoE E=4, N=64 (imported file)" in client.get("/devices/L20/report").text


def test_an_import_for_the_files_own_new_device(client: TestClient) -> None:
    name = config_file_name(576, 7168, "NVIDIA_H200")
    new = client.post(
        "/devices/H200/imports", json={"file_name": name, "content": SHIPPED}, headers=AUTH
    )
    assert new.status_code == 201 and new.json()["device_name"] == "NVIDIA_H200"
    moved = client.post(
        "/devices/L20/imports", json={"file_name": name, "content": SHIPPED}, headers=AUTH
    )
    assert moved.json()["note"] == "stored for NVIDIA_L20; the file is named for NVIDIA_H200"


@pytest.mark.parametrize(
    ("body", "device", "detail"),
    [
        ({"file_name": NAME, "content": SHIPPED[:-9]}, "L20", f"{NAME}: invalid JSON"),
        ({"file_name": NAME, "content": '{"1": {}, "1": {}}'}, "L20", "duplicate key '1'"),
        ({"file_name": "config.json", "content": SHIPPED}, "L20", "is not a config file name"),
        ({"file_name": NAME, "content": SHIPPED, "label": ""}, "L20", "at least 1 character"),
        ({"file_name": NAME}, "L20", "Field required"),
        (
            {"file_name": NAME, "content": SHIPPED},
            "H200",
            "device 'H200' is neither in the store (known: NVIDIA_L20) nor the file's device",
        ),
    ],
)
def test_a_bad_import_is_422_and_stores_nothing(
    refusing: TestClient, kept: str, body: dict, device: str, detail: str
) -> None:
    before = row_counts(kept)
    response = refusing.post(f"/devices/{device}/imports", json=body, headers=AUTH)
    assert response.status_code == 422 and detail in json.dumps(response.json()["detail"])
    assert row_counts(kept) == before


@pytest.mark.parametrize("path", ["/sweeps", "/devices/L20/imports"])
@pytest.mark.parametrize(
    ("token", "headers", "code", "detail"),
    [
        (TOKEN, {}, 401, NEEDS_TOKEN),
        (TOKEN, {"Authorization": "Bearer wrong"}, 401, NEEDS_TOKEN),
        (TOKEN, {"Authorization": TOKEN}, 401, NEEDS_TOKEN),
        (None, AUTH, 403, "writes are disabled: start the service with TUNER_API_TOKEN set"),
        ("  ", {"Authorization": "Bearer "}, 403, "writes are disabled"),  # blank: no token
    ],
)
def test_a_write_without_the_token_is_refused(
    kept: str, path: str, token: str | None, headers: dict, code: int, detail: str
) -> None:
    before = row_counts(kept)
    with TestClient(create_app(Settings(db_url=kept, api_token=token))) as client:
        response = client.post(
            path, json={**SWEEP, "file_name": NAME, "content": SHIPPED}, headers=headers
        )
    assert response.status_code == code and response.json()["detail"].startswith(detail)
    assert row_counts(kept) == before


@pytest.fixture
def port(store: str) -> Iterator[int]:
    """A uvicorn server on a free loopback port, in this process (its own thread)."""
    app = create_app(Settings(db_url=store, api_token=TOKEN, max_body_bytes=LIMIT))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    yield server.servers[0].sockets[0].getsockname()[1]
    server.should_exit = True
    thread.join(timeout=30)


def exchange(port: int, path: str, headers: dict, body: bytes = b"") -> tuple[int, dict]:
    """POST a request's head (and `body`, maybe less than it announces); one JSON answer."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.putrequest("POST", path)
    for name, value in {"Content-Type": "application/json", **headers}.items():
        connection.putheader(name, value)
    connection.endheaders(body)
    response = connection.getresponse()
    return response.status, json.loads(response.read())


def test_refusals_come_before_the_body_is_read(port: int, store: str) -> None:
    before = row_counts(store)
    imports = "/devices/NVIDIA_L20/imports"
    # 100 MB announced, none sent: an answer proves nothing was read.
    refused = (401, {"detail": NEEDS_TOKEN})
    assert exchange(port, imports, {"Content-Length": "100000000"}) == refused
    over = {"Content-Length": str(LIMIT + 1), **AUTH}
    assert exchange(port, imports, over) == (413, {"detail": TOO_LARGE})
    # Five 16 KiB chunks (80 KiB > 64 KiB), no final chunk: answered while the body is unfinished.
    chunk = b"a" * 16384
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(5))
    streamed = {"Transfer-Encoding": "chunked", **AUTH}
    assert exchange(port, imports, streamed, chunked) == (413, {"detail": TOO_LARGE})
    assert row_counts(store) == before
    payload = json.dumps({"device_name": "L20", "model": "tiny", "m_values": [1, 16]}).encode()
    sent = {"Content-Length": str(len(payload)), **AUTH}
    status, body = exchange(port, "/sweeps", sent, payload)
    assert status == 201 and body["m_values"] == [1, 16]
