"""Serving under load: closed-loop clients against the file route, the zip route and Starlette's
StaticFiles serving the same file's bytes, all in one uvicorn process on loopback.

    python bench/serve_load.py                         # fill a store: tuner sweep --replay
    python bench/serve_load.py --db sqlite:///s.db --clients 10,100 --seconds 5 --label after

The store is one replayed sweep of the synthetic sm90 landscape (5 shapes of qwen3.8-27b TP 2
x its 6 M, `tuner sweep --replay` with its defaults), unless `--db` names one. For each target
(file, zip, static) and each client count a fresh server process starts (so one run's backlog
never slows the next); N clients each keep one keep-alive connection and send the next GET as
soon as the last answer arrived, for `--seconds`. Requests still in flight then get `--drain`
seconds to finish; those that don't are counted as `unfinished`. Throughput counts 200
responses that arrived within the load window; latency percentiles cover every response.
Writes bench/results/serve_load_<label>.json.
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
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

LANDSCAPE = ROOT / "bench" / "landscapes" / "synthetic_sm90.json"
MODEL, TP = "qwen3.8-27b", 2
TARGETS = ("file", "zip", "static")


def fill_store(url: str) -> str:
    """`tuner sweep --replay` of the synthetic landscape into `url`; returns its device_name."""
    from tuner.measure.landscape import load_landscape

    landscape = load_landscape(LANDSCAPE)
    m_values = sorted({m for _, _, m in landscape.problems})
    command = [
        sys.executable,
        "-m",
        "tuner.cli",
        "sweep",
        "--device",
        landscape.device_name,
        "--replay",
        str(LANDSCAPE),
        "--model",
        MODEL,
        "--tp",
        str(TP),
        "--m",
        ",".join(map(str, m_values)),
        "--db",
        url,
    ]
    run = subprocess.run(
        command,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    if run.returncode != 0:
        raise SystemExit(f"sweep failed: {run.stderr.strip() or run.stdout.strip()}")
    return landscape.device_name


def serve(url: str, static_dir: str, port: int) -> None:
    """The server process: the tuner's app with StaticFiles mounted at /static."""
    import uvicorn
    from starlette.staticfiles import StaticFiles

    from api.app import create_app
    from api.settings import Settings

    app = create_app(Settings(db_url=url))
    app.mount("/static", StaticFiles(directory=static_dir), name="static")
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="error", access_log=False)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(url: str, static_dir: str) -> tuple[subprocess.Popen, int]:
    """Start `serve` in a child process and wait until /health answers."""
    port = free_port()
    child = subprocess.Popen(
        [sys.executable, __file__, "--serve", url, static_dir, str(port)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5).read()
            return child, port
        except OSError:
            time.sleep(0.2)
    child.kill()
    raise SystemExit("server did not start")


def stop_server(child: subprocess.Popen) -> None:
    child.terminate()
    try:
        child.wait(10)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


async def _get(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str) -> int:
    """One HTTP/1.1 GET on a keep-alive connection; returns the status (body read and dropped)."""
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    if length:
        await reader.readexactly(length)
    return status


async def _client(
    port: int, path: str, until: float, drain_until: float, record: list[tuple[float, float, str]]
) -> None:
    """Closed loop: GET, wait for the answer, GET again, until `until`."""
    connection = None
    while time.monotonic() < until:
        start = time.monotonic()
        try:
            if connection is None:
                connection = await asyncio.open_connection("127.0.0.1", port)
            status = await asyncio.wait_for(_get(*connection, path), max(drain_until - start, 0.1))
            outcome = str(status)
        except TimeoutError:
            record.append((start, float("nan"), "unfinished"))
            return
        except (OSError, asyncio.IncompleteReadError, ValueError, IndexError):
            outcome, connection = "connection_error", None
        record.append((start, time.monotonic(), outcome))
    if connection is not None:
        connection[1].close()


def summarize(record: list[tuple[float, float, str]], start: float, seconds: float) -> dict:
    """Requests/s of 200s inside the window, latency percentiles (ms), outcome counts."""
    done = sorted((end - begin) * 1000 for begin, end, outcome in record if outcome != "unfinished")
    in_window = sum(outcome == "200" and end <= start + seconds for _, end, outcome in record)
    outcomes: dict[str, int] = {}
    for _, _, outcome in record:
        outcomes[outcome] = outcomes.get(outcome, 0) + 1

    def pct(q: float) -> float | None:
        return round(done[min(len(done) - 1, int(q * len(done)))], 1) if done else None

    errors = sum(n for outcome, n in outcomes.items() if outcome != "200")
    return {
        "requests_per_s": round(in_window / seconds, 1),
        "responses": len(done),
        "errors": errors,
        "outcomes": outcomes,
        "p50_ms": pct(0.50),
        "p99_ms": pct(0.99),
        "max_ms": round(done[-1], 1) if done else None,
    }


async def load(port: int, path: str, clients: int, seconds: float, drain: float) -> dict:
    record: list[tuple[float, float, str]] = []
    start = time.monotonic()
    until, drain_until = start + seconds, start + seconds + drain
    await asyncio.gather(*(_client(port, path, until, drain_until, record) for _ in range(clients)))
    return summarize(record, start, seconds)


def paths(port: int, device_name: str, static_dir: Path, query: str) -> dict[str, str]:
    """The three targets' paths; puts the file's bytes in the static folder."""
    base = f"http://127.0.0.1:{port}/devices/{device_name}"
    listing = json.load(urllib.request.urlopen(f"{base}/configs{query}", timeout=120))
    name = listing["files"][0]["file_name"]
    quoted = urllib.request.quote(name)
    body = urllib.request.urlopen(f"{base}/configs/{quoted}{query}", timeout=120).read()
    (static_dir / "file.json").write_bytes(body)
    return {
        "file": f"/devices/{device_name}/configs/{quoted}{query}",
        "zip": f"/devices/{device_name}/configs.zip{query}",
        "static": "/static/file.json",
        "_file_bytes": str(len(body)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=None, help="a filled store (default: a fresh replay)")
    parser.add_argument("--device", default=None, help="device of --db (default: the only one)")
    parser.add_argument("--clients", default="10,100")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--drain", type=float, default=30.0)
    parser.add_argument("--query", default="", help="e.g. ?release=1, added to file and zip")
    parser.add_argument("--label", default="run")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    clients = [int(value) for value in args.clients.split(",")]
    with tempfile.TemporaryDirectory() as folder:
        url, device_name = args.db, args.device
        if url is None:
            url = f"sqlite:///{folder}/serve.db"
            device_name = fill_store(url)
        elif device_name is None:
            from db import repo
            from db.connection import open_store, session_scope

            with session_scope(open_store(url)) as session:
                device_name = repo.known_device_names(session, swept=True)[0]
        static_dir = Path(folder) / "static"
        static_dir.mkdir()
        results: list[dict] = []
        for target in TARGETS:
            for count in clients:
                child, port = start_server(url, str(static_dir))
                try:
                    route = paths(port, device_name, static_dir, args.query)
                    stats = asyncio.run(load(port, route[target], count, args.seconds, args.drain))
                finally:
                    stop_server(child)
                results.append({"target": target, "clients": count, "path": route[target], **stats})
                print(
                    f"{target:6s} {count:4d} clients: {stats['requests_per_s']:7.1f} req/s  "
                    f"p50 {stats['p50_ms']} ms  p99 {stats['p99_ms']} ms  "
                    f"errors {stats['errors']} {stats['outcomes']}",
                    flush=True,
                )
    result = {
        "label": args.label,
        "device_name": device_name,
        "file_bytes": int(route["_file_bytes"]),
        "store": args.db or f"replay of {LANDSCAPE.name}, {MODEL} TP {TP}",
        "seconds": args.seconds,
        "drain_s": args.drain,
        "results": results,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "network": "loopback",
        },
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join(["python", "bench/serve_load.py", *sys.argv[1:]]),
    }
    out = args.out or ROOT / "bench" / "results" / f"serve_load_{args.label}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--serve":
        serve(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        main()
