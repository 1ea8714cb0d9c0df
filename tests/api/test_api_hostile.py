"""Hostile requests, over real HTTP to uvicorn on loopback: a blank token
closes the write routes, the token is checked before any body is read, bodies have a size
limit applied while they are read, and error bodies quote only an excerpt of the input."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import Settings
from tests.storefill import DEFAULT, FAST, SLOW, fill, publish, row_counts

TOKEN = "s3cret-token"
LIMIT = 64 * 1024  # the test services' TUNER_MAX_BODY_BYTES
PLAN = {
    (576, 7168, 1): [(DEFAULT, True, "ok", 10.0), (FAST, False, "ok", 6.0)],
    (576, 7168, 16): [(DEFAULT, True, "ok", 10.0), (SLOW, False, "ok", 12.0)],
}
IMPORTS = "/devices/NVIDIA_L20/imports"
TOO_LARGE = f"request body over {LIMIT} bytes (the service's TUNER_MAX_BODY_BYTES)"
NEEDS_TOKEN = "a valid 'Authorization: Bearer <token>' header is required"


@pytest.fixture
def store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    fill(url, PLAN, m_values=(1, 16))
    publish(url)
    return url


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


def exchange(port: int, head: list[str], body: bytes = b"") -> tuple[int, dict]:
    """Send a request's head (and `body`, maybe only part of what it announces), then read one
    response within 10 s; returns (status, JSON body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(("\r\n".join([*head, "Host: 127.0.0.1", "", ""])).encode() + body)
        reply = b""
        while b"\r\n\r\n" not in reply:
            reply += sock.recv(65536)
        top, _, rest = reply.partition(b"\r\n\r\n")
        lines = top.decode("latin-1").split("\r\n")
        length = next(
            int(line.split(":")[1]) for line in lines if line.lower().startswith("content-length:")
        )
        while len(rest) < length:
            rest += sock.recv(65536)
    return int(lines[0].split()[1]), json.loads(rest)


def test_a_write_without_the_token_is_refused_before_its_body_is_sent(
    port: int, store: str
) -> None:
    before = row_counts(store)
    # The head announces 100 MB and none of it is sent: an answer proves nothing was read.
    status, body = exchange(
        port,
        [f"POST {IMPORTS} HTTP/1.1", "Content-Length: 100000000", "Content-Type: application/json"],
    )
    assert (status, body) == (401, {"detail": NEEDS_TOKEN})
    status, body = exchange(
        port, ["POST /sweeps HTTP/1.1", "Content-Length: 100000000", "Authorization: Bearer wrong"]
    )
    assert (status, body) == (401, {"detail": NEEDS_TOKEN})
    assert row_counts(store) == before


def test_a_body_announced_over_the_limit_is_a_413_before_it_is_sent(port: int) -> None:
    status, body = exchange(
        port,
        [
            f"POST {IMPORTS} HTTP/1.1",
            f"Content-Length: {LIMIT + 1}",
            "Content-Type: application/json",
            f"Authorization: Bearer {TOKEN}",
        ],
    )
    assert (status, body) == (413, {"detail": TOO_LARGE})


def test_a_chunked_body_is_cut_off_at_the_limit_while_it_is_read(port: int, store: str) -> None:
    before = row_counts(store)
    chunk = b"a" * 16384
    # Five 16 KiB chunks (80 KiB > 64 KiB) and no final chunk: the server answers while the
    # body is still unfinished, so it never waited for (or kept) the whole of it.
    body = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(5))
    status, answer = exchange(
        port,
        [
            f"POST {IMPORTS} HTTP/1.1",
            "Transfer-Encoding: chunked",
            "Content-Type: application/json",
            f"Authorization: Bearer {TOKEN}",
        ],
        body,
    )
    assert (status, answer) == (413, {"detail": TOO_LARGE})
    assert row_counts(store) == before


def test_a_body_under_the_limit_is_read(port: int) -> None:
    payload = json.dumps({"device_name": "L20", "model": "tiny", "m_values": [1, 16]}).encode()
    status, body = exchange(
        port,
        [
            "POST /sweeps HTTP/1.1",
            f"Content-Length: {len(payload)}",
            "Content-Type: application/json",
            f"Authorization: Bearer {TOKEN}",
        ],
        payload,
    )
    assert status == 201 and body["m_values"] == [1, 16]


@pytest.mark.parametrize("blank", ["", "   ", "\t"])
def test_a_blank_token_closes_the_write_routes(store: str, blank: str) -> None:
    settings = Settings(db_url=store, api_token=blank)
    assert settings.api_token is None
    before = row_counts(store)
    with TestClient(create_app(settings)) as client:
        response = client.post(
            "/sweeps",
            json={"device_name": "L20", "model": "tiny"},
            headers={"Authorization": "Bearer "},
        )
    assert response.status_code == 403
    assert response.json()["detail"].startswith("writes are disabled")
    assert row_counts(store) == before


def test_the_token_and_limit_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUNER_API_TOKEN", "  padded  ")
    monkeypatch.setenv("TUNER_MAX_BODY_BYTES", "1000")
    settings = Settings()
    assert settings.api_token.get_secret_value() == "padded"
    assert settings.max_body_bytes == 1000
    assert Settings(_env_file=None, api_token=None).max_body_bytes == 1000


def test_a_422_quotes_an_excerpt_of_the_input(store: str) -> None:
    content = "a" * 1_500_000  # over ImportRequest's 1 MiB, under the 4 MiB body limit
    with TestClient(create_app(Settings(db_url=store, api_token=TOKEN))) as client:
        response = client.post(
            IMPORTS,
            json={"file_name": "x.json", "content": content},
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        long_list = client.post(
            "/sweeps",
            json={"device_name": "L20", "model": "tiny", "m_values": list(range(1, 100_001))},
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        many = client.post(
            "/sweeps",
            json={"device_name": "L20", "model": "tiny", "m_values": ["x"] * 30},
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
    assert response.status_code == 422 and len(response.content) < 1000
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", "content"] and error["type"] == "string_too_long"
    assert error["input"] == "a" * 120 + "... (1500000 characters)"
    assert long_list.status_code == 422 and len(long_list.content) < 1000
    [error] = long_list.json()["detail"]
    assert error["input"].startswith("[1, 2, 3, ") and error["input"].endswith(" characters)")
    assert many.status_code == 422
    assert len(many.json()["detail"]) == 10 and many.json()["errors_total"] == 30
    assert many.json()["detail"][0]["input"] == "x"  # a short input is quoted whole


def test_every_write_route_declares_the_token(store: str) -> None:
    schema = create_app(Settings(db_url=store)).openapi()
    writes = {
        (method, path): operation
        for path, item in schema["paths"].items()
        for method, operation in item.items()
        if method in ("post", "put", "patch", "delete")
    }
    assert {("post", "/sweeps"), ("post", "/devices/{device_name}/imports")} <= set(writes)
    for key, operation in writes.items():
        headers = {p["name"] for p in operation.get("parameters", []) if p["in"] == "header"}
        assert "authorization" in headers, key  # RequestGuard asks every write for it
