"""tiny-moe end to end on the interpreter: one sweep command tunes, publishes, and the E=... file
downloads over HTTP byte for byte as exported; winners, verify, mounts and the report take it."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

from fastapi.testclient import TestClient
from typer.testing import CliRunner

from api.app import create_app
from api.settings import Settings
from tuner.cli.app import app

MOE = "E=4,N=64,device_name=TRITON_INTERPRETER,dtype=fp8_w8a8,block_shape=[128,128].json"
DENSE = "N=256,K=128,device_name=TRITON_INTERPRETER,dtype=fp8_w8a8,block_shape=[128,128].json"
KEYS = {"BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages"}
runner = CliRunner()


def test_tiny_moe_sweep_publish_download(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/t.db"
    sweep = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuner.cli",
            "sweep",
            "--device",
            "interpreter",
            "--model",
            "tiny-moe",
            "--m",
            "1",
            "--trials",
            "2",
            "--db",
            db,
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert sweep.returncode == 0, sweep.stderr
    assert sweep.stdout.splitlines()[-1].startswith(
        "published TRITON_INTERPRETER release 1: 2 file(s), content "
    )
    export = runner.invoke(
        app, ["export", "--device", "interpreter", "--out", str(tmp_path / "out"), "--db", db]
    )
    assert export.exit_code == 0, export.output
    exported = (tmp_path / "out" / MOE).read_bytes()
    entry = json.loads(exported)
    # The Triton of the winners first, as vLLM's benchmark_moe.py writes MoE files.
    assert list(entry) == ["triton_version", "1"] and set(entry["1"]) == KEYS
    assert entry["triton_version"] == importlib.metadata.version("triton")
    with TestClient(create_app(Settings(db_url=db))) as client:
        listing = client.get("/devices/TRITON_INTERPRETER/configs")
        assert listing.status_code == 200, listing.text
        assert [f["file_name"] for f in listing.json()["files"]] == [MOE, DENSE]
        download = client.get(f"/devices/TRITON_INTERPRETER/configs/{MOE}")
        assert download.status_code == 200, download.text
        assert download.content == exported
        assert download.headers["X-Tuner-Release"] == "1"
        # by an alias of the device: the release's files are found by their family's parser
        by_alias = client.get(f"/devices/interpreter/configs/{MOE}")
        assert (by_alias.status_code, by_alias.content) == (200, exported), by_alias.text
        preview = client.get(f"/devices/TRITON_INTERPRETER/preview/configs/{MOE}")
        assert (preview.status_code, preview.content) == (200, exported)
        report = client.get("/devices/TRITON_INTERPRETER/report").text
        assert (
            "<h2>MoE E=4, N=64, K=128 (top_k=2), block_shape [128, 128] (tiny-moe)</h2>" in report
        )
        mounts = client.get("/devices/TRITON_INTERPRETER/mounts").text
        assert mounts.splitlines()[-2:] == [
            '  -v "$PWD/configs:/opt/blockfp8-tuner/moe-configs:ro" \\',
            "  -e VLLM_TUNED_CONFIG_FOLDER=/opt/blockfp8-tuner/moe-configs \\",
        ]
    winners = runner.invoke(
        app, ["winners", "--device", "interpreter", "--db", db], env={"COLUMNS": "200"}
    )
    assert winners.exit_code == 0, winners.output
    kernels = [
        line.split()[:4]
        for line in winners.stdout.splitlines()
        if line.startswith(("dense", "moe"))
    ]
    assert kernels == [["dense", "256", "128", "1"], ["moe", "E=4,top_k=2", "64", "128"]]
    verify = runner.invoke(
        app,
        [
            "verify",
            "--device",
            "interpreter",
            "--model",
            "tiny-moe",
            "--db",
            db,
            "--m",
            "1",
            "--no-publish",
        ],
    )
    assert verify.exit_code == 0, verify.output
    assert verify.stdout.splitlines()[0] == (
        "note: MoE files are not verified yet (tiny-moe TP 1: E=4 N=64)"
    )
