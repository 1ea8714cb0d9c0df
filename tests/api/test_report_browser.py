"""The HTML report in a real browser: headless Chromium against uvicorn on loopback renders
every shape's charts (points in the DOM, a screenshot that is not blank).

Needs /usr/bin/chromium (Debian: `apt-get install -y chromium`); skipped without it.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import time
import urllib.request
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.storefill import DEFAULT, FAST, SLOW, fill
from tuner.core import VLLM_M_GRID

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="headless Chromium not installed at /usr/bin/chromium (apt-get install -y chromium)",
)
SHAPES = [(7168, 5120), (5120, 3072), (17408, 5120)]
GAP_M = 3072  # no trial: a coverage gap


def _plan() -> dict:
    plan = {}
    for N, K in SHAPES:
        for M in VLLM_M_GRID:
            if M == GAP_M:
                continue
            default_us = 8.0 + 2e-6 * M * N * K / 1000
            best = FAST if M < 256 else SLOW
            plan[(N, K, M)] = [
                (DEFAULT, True, "ok", default_us),
                (best, False, "ok", default_us * (0.7 if M < 64 else 0.9)),
            ]
    return plan


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    fill(url, _plan(), m_values=VLLM_M_GRID)
    port = _free_port()
    env = {**os.environ, "TUNER_DB_URL": url}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "api.app:create_app",
            "--factory",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{base}/health", timeout=2).read()
                break
            except OSError:
                assert process.poll() is None, process.stderr.read().decode()
                assert time.monotonic() < deadline, "uvicorn did not start"
                time.sleep(0.2)
        yield base
    finally:
        process.terminate()
        process.wait(10)


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / "chromium-profile"
    command = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        *args,
    ]
    try:
        return subprocess.run(command, capture_output=True, timeout=90, check=True)
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def _png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Decode an 8-bit RGB/RGBA non-interlaced PNG (what Chromium writes) into rows."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    offset, idat, header = 8, b"", None
    while offset < len(data):
        length, kind = struct.unpack(">I4s", data[offset : offset + 8])
        chunk = data[offset + 8 : offset + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT":
            idat += chunk
        offset += 12 + length
    width, height, depth, color, _, _, interlace = header
    assert (depth, interlace) == (8, 0) and color in (2, 6)
    bpp = 3 if color == 2 else 4
    raw, stride, rows, previous = zlib.decompress(idat), width * bpp, [], bytes(width * bpp)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        for i in range(stride):
            left = line[i - bpp] if i >= bpp else 0
            up, up_left = previous[i], previous[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - up_left
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - up_left)
                line[i] = (
                    line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else up_left)
                ) & 255
        previous = bytes(line)
        rows.append(bytes(b for j in range(0, stride, bpp) for b in line[j : j + 3]))
    return width, height, rows


def test_report_renders_every_chart(server: str, tmp_path: Path) -> None:
    url = f"{server}/devices/L20/report"
    dom = _chromium(tmp_path, "--dump-dom", url).stdout.decode()
    assert "Block-FP8 GEMM tuning report: NVIDIA_L20" in dom
    for N, K in SHAPES:
        for kind, series in (
            ("latency", ("winner", "default config")),
            ("speedup", ("speedup over default",)),
        ):
            match = re.search(rf'<svg class="chart {kind} shape-{N}x{K}".*?</svg>', dom, re.S)
            assert match, f"no {kind} chart for N={N}, K={K}"
            for name in series:
                xs = re.findall(rf'data-series="{name}" data-x="(\d+)"', match.group(0))
                assert [int(x) for x in xs] == [M for M in VLLM_M_GRID if M != GAP_M], name
        assert re.search(rf"Coverage gaps: no winner yet for M = {GAP_M}\.", dom)

    shot = tmp_path / "report.png"
    _chromium(tmp_path, f"--screenshot={shot}", "--window-size=1200,1900", url)
    width, height, rows = _png_pixels(shot.read_bytes())
    assert (width, height) == (1200, 1900)
    colours = {row[i : i + 3] for row in rows[::4] for i in range(0, len(row), 12)}
    assert len(colours) > 20, "the screenshot is blank"
    blue, red = bytes((0x1F, 0x6F, 0xEB)), bytes((0xCF, 0x22, 0x2E))
    pixels = [row[i : i + 3] for row in rows for i in range(0, len(row), 3)]
    assert pixels.count(blue) > 500, "no winner line drawn"
    assert pixels.count(red) > 200, "no default line drawn"
    keep = os.environ.get("TUNER_REPORT_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)
