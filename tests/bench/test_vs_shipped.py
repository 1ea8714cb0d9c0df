"""bench/vs_shipped.py on the CPU: the dry run against a store and shipped files, one-line
errors, and the GPU path with its GPU parts replaced (what the JSON holds, where it goes)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import sys
from pathlib import Path

import pytest
from sqlalchemy import text

from db.connection import open_store, session_scope
from tests.storefill import fill
from tests.tuner.compare.shippedfakes import CEILINGS, FAST, SLOW, A, D, FakeRunner, write_shipped
from tuner.files.provenance import current_kernel_hash, installed_triton_minor

REPO = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("vs_shipped", REPO / "bench" / "vs_shipped.py")
vs = importlib.util.module_from_spec(SPEC)
sys.modules["vs_shipped"] = vs
SPEC.loader.exec_module(vs)


def _fill_store(tmp_path: Path, *, kernel_hash: str = "abc123", triton: str = "3.6.0") -> str:
    """Winners for shape A at M=1 and 64, from trials of this kernel hash and Triton."""
    tmp_path.mkdir(exist_ok=True)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    fast, slow = FAST.as_dict(), SLOW.as_dict()
    fill(
        url,
        {
            (*A, 1): [(D.as_dict(), True, "ok", 20.0), (fast, False, "ok", 10.0)],
            (*A, 64): [(D.as_dict(), True, "ok", 30.0), (slow, False, "ok", 35.0)],
        },
        device_name="NVIDIA_H200",
        m_values=(1, 64),
    )
    engine = open_store(url)
    try:
        with session_scope(engine) as session:
            session.execute(
                text("UPDATE environments SET kernel_hash = :k, triton = :t"),
                {"k": kernel_hash, "t": triton},
            )
    finally:
        engine.dispose()
    return url


def test_dry_run_lists_what_would_be_timed(tmp_path, capsys):
    shipped = write_shipped(tmp_path / "shipped")
    args = [
        "--dry-run",
        "--device",
        "H200",
        "--db",
        _fill_store(tmp_path),
        "--shipped-dir",
        str(shipped),
        "--shapes",
        "7168,2048",
        "--shapes",
        "1024,512",
        "--m",
        "1,16",
    ]
    # The store's trials ran kernel abc123 on Triton 3.6.0: not the current kernel, left out.
    assert vs.main(args) == 0
    assert capsys.readouterr().out.splitlines() == [
        "NVIDIA_H200: 2 (shape, M) in 1 shape(s) with shipped files; no shipped file for "
        f"1024,512; our winners for 0 shape(s) (kernel {current_kernel_hash()[:12]}, Triton "
        f"{installed_triton_minor()})",
        "N=7168 K=2048 M=1: ours -; shipped 16x32x128 g64 w4 s4; default 64x128x128 g32 w4 s2",
        "N=7168 K=2048 M=16: ours -; shipped 16x64x128 g1 w4 s3; default 64x128x128 g32 w4 s2",
    ]
    assert vs.main([*args, "--allow-stale"]) == 0
    stale = capsys.readouterr().out.splitlines()
    assert stale[0] == (
        "NVIDIA_H200: 2 (shape, M) in 1 shape(s) with shipped files; no shipped "
        "file for 1024,512; our winners for 1 shape(s) (any kernel and Triton: "
        "--allow-stale)"
    )
    current = _fill_store(
        tmp_path / "current",
        kernel_hash=current_kernel_hash(),
        triton=importlib.metadata.version("triton"),
    )
    assert vs.main([*args, "--db", current]) == 0
    assert (
        capsys.readouterr().out.splitlines()[1:]
        == stale[1:]
        == [
            "N=7168 K=2048 M=1: ours 16x64x128 g1 w4 s3 (key 1); shipped 16x32x128 g64 w4 s4; "
            "default 64x128x128 g32 w4 s2",
            "N=7168 K=2048 M=16: ours 16x64x128 g1 w4 s3 (key 1); shipped 16x64x128 g1 w4 s3; "
            "default 64x128x128 g32 w4 s2",
        ]
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--device", "H100", "--dry-run"], "no shipped files for H100 under"),
        (
            ["--device", "H200", "--dry-run", "--db", "sqlite:////nonexistent/x.db"],
            "no store at /nonexistent/x.db",
        ),
        ([], "no CUDA GPU visible: pass --device NAME"),
        (
            ["--device", "H200", "--dry-run", "--tp", "3"],
            "model 'deepseek-v3' has no shapes for TP 3",
        ),
        (["--device", "H200", "--rounds", "1", "--dry-run"], "--rounds must be at least 2, got 1"),
        (["--device", "H200"], "no visible GPU is H200 (visible: none); timing needs one"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, no_visible_gpu, args, message):
    shipped = write_shipped(tmp_path / "shipped")
    assert vs.main([*args, "--shipped-dir", str(shipped)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"vs_shipped: error: {message}") and err.count("\n") == 1


def test_gpu_run_wiring_with_fakes(tmp_path, capsys, monkeypatch):
    """The CUDA path of main() with the GPU parts replaced: what it writes, and where."""
    import torch

    import tuner.measure.roofline
    import tuner.measure.runner
    import tuner.run.gpus
    import tuner.run.worker
    from tuner.run.gpus import GpuInfo

    log = []
    env = {
        "gpu_name": "NVIDIA H200",
        "compute_capability": "9.0",
        "torch": "2.11.0",
        "triton": "3.6.0",
        "tuner": "0.1.0",
        "cuda": "12.8",
        "driver": "570.1",
        "kernel_hash": "abc",
    }
    monkeypatch.setattr(
        tuner.run.gpus,
        "visible_gpus",
        lambda: [GpuInfo(0, "0", "NVIDIA H200", "NVIDIA_H200", "9.0")],
    )
    monkeypatch.setattr(torch.cuda, "set_device", lambda index: log.append(("device", index)))
    monkeypatch.setattr(tuner.run.worker, "collect_environment", lambda backend, **_: env)
    monkeypatch.setattr(tuner.measure.roofline, "measure_ceilings", lambda device: CEILINGS)
    monkeypatch.setattr(
        tuner.measure.runner, "KernelRunner", lambda problem, device: FakeRunner(problem, log)
    )
    out = tmp_path / "out.json"
    args = [
        "--db",
        _fill_store(tmp_path),
        "--shipped-dir",
        str(write_shipped(tmp_path / "s")),
        "--shapes",
        "7168,2048",
        "--m",
        "1,64",
        "--rounds",
        "3",
        "--out",
        str(out),
        "--allow-stale",
    ]
    assert vs.main(args) == 0
    assert log[0] == ("device", 0)
    doc = json.loads(out.read_text())
    assert doc["command"] == "python bench/vs_shipped.py " + " ".join(args)
    assert {
        k: doc[k]
        for k in (
            "benchmark",
            "device_name",
            "gpu_name",
            "compute_capability",
            "backend",
            "shipped_files",
            "model",
            "tp",
            "shapes",
            "m",
            "out_dtype",
            "block_shape",
            "rounds",
            "ceilings",
            "winners_from",
        )
    } == {
        "benchmark": "vs_shipped",
        "device_name": "NVIDIA_H200",
        "gpu_name": "NVIDIA H200",
        "compute_capability": "9.0",
        "backend": "cuda",
        "shipped_files": "s",
        "model": "deepseek-v3",
        "tp": None,
        "shapes": [[7168, 2048]],
        "m": [1, 64],
        "out_dtype": "bfloat16",
        "block_shape": [128, 128],
        "rounds": 3,
        "ceilings": CEILINGS,
        "winners_from": {"kernel_hash": None, "triton_minor": None},
    }
    assert doc["versions"] == {
        k: env[k] for k in ("torch", "triton", "tuner", "cuda", "driver", "kernel_hash")
    }
    assert [
        (r["M"], r["ours"]["latency_us"], r["shipped"]["latency_us"], r["default"]["latency_us"])
        for r in doc["rows"]
    ] == [(1, 11.0, 16.0, 21.0), (64, 31.0, 26.0, 31.0)]
    assert doc["date"].endswith("+00:00")
    printed = capsys.readouterr().out
    assert "ceilings: copy 4,000 GB/s, FP8 mm 1,000.0 TFLOP/s" in printed
    assert f"wrote {out}" in printed
