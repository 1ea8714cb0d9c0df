"""The service's memory under hostile bodies: `tuner serve` on loopback, its idle RSS, then its
peak RSS while clients send large bodies to `POST /devices/{d}/imports` at once.

    python bench/serve_memory.py                       # 4 clients x 50 MB, each case below
    python bench/serve_memory.py --clients 4 --mb 50 --label after

Cases (each its own fresh server, started with `TUNER_API_TOKEN` set): `no token` (no
Authorization header), `token` (the right token, `Content-Length` given) and `token, chunked`
(the right token, no `Content-Length`: the server learns the size only by reading); each sent
as curl sends a large body (`Expect: 100-continue`: the body follows a `100 Continue`, or after
1 s without an answer), and `no token, blind`, which sends the body at once. The body is an
import request whose `content` is `--mb` MB of "a". Status 0: the server closed the connection
while the client was still sending, and the reset lost its answer. RSS is read from /proc every
5 ms while the clients send and until they have their answers; `after` is the RSS 2 s later.
Target: the peak within 50 MB of idle. Writes bench/results/serve_memory_<label>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "bench-token"  # what the server is started with
PATH = "/devices/NVIDIA_L20/imports"  # a token-protected write route
CHUNK = 1 << 20  # bytes a client writes at a time
SAMPLE_S = 0.005  # RSS sampling period
CASES = ("no token", "no token, blind", "token", "token, chunked")
EXPECT_WAIT_S = 1.0  # curl's wait for `100 Continue` before it sends the body anyway


def rss_bytes(pid: int) -> int:
    """Resident set size of a process, from /proc/<pid>/status (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(url: str, extra_env: dict[str, str]) -> tuple[subprocess.Popen, int]:
    """`tuner serve` in a child process; waits until /health answers."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TUNER_API_TOKEN": TOKEN, **extra_env}
    child = subprocess.Popen(
        [sys.executable, "-m", "tuner.cli", "serve", "--db", url, "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5).read()
            return child, port
        except OSError:
            if child.poll() is not None:
                raise SystemExit(f"tuner serve exited: {child.stderr.read().decode()}") from None
            time.sleep(0.2)
    child.kill()
    raise SystemExit("tuner serve did not answer /health within 120 s")


def body_parts(mb: int) -> tuple[bytes, int, bytes]:
    """The import request's JSON as (head, number of "a" bytes, tail)."""
    return (b'{"file_name": "x.json", "label": "bench", "content": "', mb * 1_000_000, b'"}')


async def _send_body(writer: asyncio.StreamWriter, mb: int, chunked: bool) -> None:
    head, size, tail = body_parts(mb)
    filler = b"a" * CHUNK
    pieces = [head] + [filler] * (size // CHUNK) + [filler[: size % CHUNK], tail]
    for piece in pieces:
        if not piece:
            continue
        writer.write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
        await writer.drain()
    if chunked:
        writer.write(b"0\r\n\r\n")
        await writer.drain()


async def _client(port: int, mb: int, token: bool, chunked: bool, expect: bool) -> tuple[int, int]:
    """One request; returns (status, response body bytes); status 0 if the connection broke
    before an answer came."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head, size, tail = body_parts(mb)
    lines = [
        f"POST {PATH} HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        "Content-Type: application/json",
        "Connection: close",
    ]
    lines.append(
        "Transfer-Encoding: chunked"
        if chunked
        else f"Content-Length: {len(head) + size + len(tail)}"
    )
    if token:
        lines.append(f"Authorization: Bearer {TOKEN}")
    if expect:
        lines.append("Expect: 100-continue")
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
    sender = None
    try:
        status_line = b""
        if expect:
            try:
                status_line = await asyncio.wait_for(reader.readline(), EXPECT_WAIT_S)
            except TimeoutError:
                pass
            if status_line.startswith(b"HTTP/1.1 100"):
                await reader.readline()  # the blank line after `100 Continue`
                status_line = b""
        if not status_line:
            sender = asyncio.create_task(_send_body(writer, mb, chunked))
            status_line = await reader.readline()
        status = int(status_line.split()[1]) if status_line else 0
        length = 0
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        received = len(await reader.readexactly(length)) if length else 0
    except (ConnectionError, asyncio.IncompleteReadError):
        status, received = 0, 0
    finally:
        if sender is not None:
            sender.cancel()
            try:
                await sender
            except (asyncio.CancelledError, ConnectionError):
                pass
        writer.close()
    return status, received


async def _clients(port: int, count: int, mb: int, case: str) -> list:
    token, chunked, expect = case.startswith("token"), case.endswith("chunked"), "blind" not in case
    return await asyncio.gather(*(_client(port, mb, token, chunked, expect) for _ in range(count)))


def run_case(url: str, case: str, count: int, mb: int, extra_env: dict[str, str]) -> dict:
    """Idle RSS, peak RSS while `count` clients send `mb` MB each, and RSS 2 s later."""
    child, port = start_server(url, extra_env)
    try:
        for _ in range(3):  # warm: the store opened, the routes imported
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5).read()
        time.sleep(0.5)
        idle = rss_bytes(child.pid)
        peak, done = idle, threading.Event()

        def sample() -> None:
            nonlocal peak
            while not done.is_set():
                peak = max(peak, rss_bytes(child.pid))
                time.sleep(SAMPLE_S)

        sampler = threading.Thread(target=sample)
        sampler.start()
        start = time.monotonic()
        answers = asyncio.run(_clients(port, count, mb, case))
        seconds = time.monotonic() - start
        time.sleep(0.2)
        done.set()
        sampler.join()
        time.sleep(2.0)
        after = rss_bytes(child.pid)
    finally:
        child.terminate()
        child.wait(timeout=30)
    mib = 1 << 20
    return {
        "case": case,
        "clients": count,
        "body_mb": mb,
        "statuses": sorted(a[0] for a in answers),
        "response_bytes": sorted(a[1] for a in answers),
        "seconds": round(seconds, 2),
        "idle_mib": round(idle / mib, 1),
        "peak_mib": round(peak / mib, 1),
        "after_mib": round(after / mib, 1),
        "peak_over_idle_mib": round((peak - idle) / mib, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--mb", type=int, default=50, help="body size of each client, in MB")
    parser.add_argument("--label", default="run")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        help="NAME=VALUE for the server, e.g. TUNER_MAX_BODY_BYTES=1048576",
    )
    args = parser.parse_args()
    extra_env = dict(item.split("=", 1) for item in args.env)
    results = []
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{folder}/tuner.db"
        for case in CASES:
            result = run_case(url, case, args.clients, args.mb, extra_env)
            results.append(result)
            print(
                f"{case:16s} idle {result['idle_mib']:6.1f} MiB  peak {result['peak_mib']:6.1f}"
                f" MiB (+{result['peak_over_idle_mib']:.1f})  after {result['after_mib']:6.1f}"
                f" MiB  statuses {result['statuses']}  response bytes "
                f"{result['response_bytes']}  {result['seconds']} s",
                flush=True,
            )
    record = {
        "label": args.label,
        "path": PATH,
        "results": results,
        "env": extra_env,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "gpu": None,
            "network": "loopback",
        },
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join(["python", "bench/serve_memory.py", *sys.argv[1:]]),
    }
    out = args.out or ROOT / "bench" / "results" / f"serve_memory_{args.label}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
