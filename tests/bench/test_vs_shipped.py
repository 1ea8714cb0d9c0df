"""bench/vs_shipped.py on the CPU: shipped files read, our merged configs picked as vLLM would,
every config checked then re-timed interleaved with fake timings, and the JSON checked exactly."""

from __future__ import annotations

import importlib.util
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.storefill import fill
from tuner.configfile import config_file_name, dump_config_file
from tuner.provenance import current_kernel_hash, installed_triton_minor
from tuner.roofline import gemm_bytes, gemm_flops
from tuner.space import KernelConfig, default_config
from tuner.trial import TrialResult, TrialStatus

REPO = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("vs_shipped", REPO / "bench" / "vs_shipped.py")
vs = importlib.util.module_from_spec(SPEC)
sys.modules["vs_shipped"] = vs
SPEC.loader.exec_module(vs)

D = default_config()  # 64x128x128 g32 w4 s2
FAST = KernelConfig(16, 64, 128, 1, 4, 3)
SLOW = KernelConfig(128, 256, 128, 64, 8, 5)
S1 = KernelConfig(16, 32, 128, 64, 4, 4)
S64 = KernelConfig(32, 128, 128, 1, 4, 3)
S4096 = KernelConfig(128, 128, 128, 32, 8, 3)
WRONG = KernelConfig(16, 128, 128, 1, 4, 2)  # the fake runner says its output is wrong
A, B = (7168, 2048), (576, 7168)
SHIPPED = {A: {1: S1, 16: FAST, 64: S64}, B: {1: WRONG, 4096: S4096}}
# Fake base latency_us per (N, K, M, config); samples are base, base + 1, base + 2 repeating,
# so with 3 rounds every config's median is base + 1, p20 base + 0.4, p80 base + 1.6.
BASE = {
    (*A, 1, FAST): 10, (*A, 1, S1): 15, (*A, 1, D): 20,
    (*A, 16, FAST): 12, (*A, 16, D): 18,
    (*A, 64, S64): 25, (*A, 64, D): 30,
    (*B, 1, D): 40,
    (*B, 4096, S4096): 300, (*B, 4096, D): 200,
}
CEILINGS = {"copy_gbps": 4000.0, "fp8_mm_tflops": 1000.0}


@dataclass(frozen=True)
class Winner:
    """A db.repo.WinnerRow stand-in."""

    N: int
    K: int
    M: int
    config: dict
    latency_us: float
    default_latency_us: float | None
    is_default: bool = False
    block_shape: tuple[int, int] = (128, 128)
    device_name: str = "NVIDIA_H200"


# M=1: FAST beats the default; M=64: SLOW is slower than the default, so the file has the default.
WINNERS = [Winner(*A, 1, FAST.as_dict(), 10.0, 20.0), Winner(*A, 64, SLOW.as_dict(), 35.0, 30.0)]


class FakeRunner:
    """check() fails WRONG; sample_us() answers the BASE timings; every call is logged."""

    def __init__(self, problem, log):
        self.problem, self.log, self.count = problem, log, {}

    def check(self, config):
        self.log.append(("check", self.problem.M, config))
        if config == WRONG:
            return TrialResult(TrialStatus.WRONG_RESULT, rel_error=0.5,
                               error="relative error 0.5 >= 0.01")
        return TrialResult(TrialStatus.OK, rel_error=1e-3)

    def sample_us(self, config):
        self.log.append(("sample", self.problem.M, config))
        n = self.count[config] = self.count.get(config, -1) + 1
        p = self.problem
        return BASE[(p.N, p.K, p.M, config)] + n % 3


def _write_shipped(folder: Path) -> Path:
    where = folder / "NVIDIA_H200"
    where.mkdir(parents=True)
    for (N, K), configs in SHIPPED.items():
        body = dump_config_file({M: c.as_dict() for M, c in configs.items()})
        (where / config_file_name(N, K, "NVIDIA_H200")).write_text(body)
    other = config_file_name(4096, 512, "NVIDIA_H200", (64, 64))  # another block_shape: left out
    (where / other).write_text(dump_config_file({1: D.as_dict()}))
    (folder / "NVIDIA_L20").mkdir()
    return folder


def _entries(tmp_path: Path):
    shipped = vs.read_shipped(_write_shipped(tmp_path / "shipped"), "NVIDIA_H200")
    return vs.plan(shipped, vs.our_files(WINNERS), [A, (1024, 512), B])


def test_shipped_files_and_our_merged_configs(tmp_path):
    shipped = vs.read_shipped(_write_shipped(tmp_path / "shipped"), "NVIDIA_H200")
    assert shipped == {k: {M: c.as_dict() for M, c in v.items()} for k, v in SHIPPED.items()}
    assert vs.our_files(WINNERS) == {A: {1: FAST.as_dict(), 64: D.as_dict()}}
    with pytest.raises(ValueError, match=r"no shipped files for NVIDIA_H100 under .* \(devices "
                       r"there: NVIDIA_H200, NVIDIA_L20\)"):
        vs.read_shipped(tmp_path / "shipped", "NVIDIA_H100")


def test_plan_picks_our_config_as_vllm_would(tmp_path):
    entries = _entries(tmp_path)
    assert [(e.N, e.K, e.M, e.ours, e.ours_key, e.shipped) for e in entries] == [
        (*A, 1, FAST, 1, S1),
        (*A, 16, FAST, 1, FAST),  # keys 1 and 64: 16 is nearer to 1
        (*A, 64, D, 64, S64),  # the no-regression rule put the default at 64
        (*B, 1, None, None, WRONG),  # no winners for B
        (*B, 4096, None, None, S4096),
    ]
    assert all(e.default == D for e in entries)
    assert [e.M for e in vs.plan(vs.read_shipped(tmp_path / "shipped", "NVIDIA_H200"), {}, [A],
                                 m_values=[16, 4096])] == [16]


def _cell(config, key, base):
    return {"config": config.as_dict(), "key_M": key, "status": "ok", "latency_us": base + 1.0,
            "p20_us": base + 0.4, "p80_us": base + 1.6, "rounds": 3}


def _figures(N, K, M, us):
    gbps, tflops = gemm_bytes(M, N, K) / us / 1e3, gemm_flops(M, N, K) / us / 1e6
    return {"gbps": round(gbps, 1), "tflops": round(tflops, 2),
            "copy_ratio": round(gbps / 4000, 4), "fp8_mm_ratio": round(tflops / 1000, 4),
            "bound": "memory"}


def test_one_interleaved_run_per_m_and_the_exact_json(tmp_path):
    log = []
    rows = vs.compare(_entries(tmp_path), lambda problem: FakeRunner(problem, log), rounds=3,
                      ceilings=CEILINGS)
    # M=1 of A: three distinct configs, checked first, then A B C / B C A / C A B.
    first = [(kind, c) for kind, M, c in log[:12]]
    assert first == [("check", FAST), ("check", S1), ("check", D),
                     ("sample", FAST), ("sample", S1), ("sample", D),
                     ("sample", S1), ("sample", D), ("sample", FAST),
                     ("sample", D), ("sample", FAST), ("sample", S1)]
    assert sum(1 for kind, M, c in log if kind == "sample" and c == WRONG) == 0
    meta = {"date": "2026-11-30T00:00:00+00:00", "command": "python bench/vs_shipped.py",
            "device_name": "NVIDIA_H200", "versions": {"torch": "2.11.0", "triton": "3.6.0"},
            "ceilings": CEILINGS}
    doc = vs.result_doc(rows, meta)
    expected_rows = [
        {"N": 7168, "K": 2048, "M": 1, "ours": _cell(FAST, 1, 10),
         "shipped": _cell(S1, 1, 15), "default": _cell(D, None, 20), "noise_us": 1.2,
         "speedup_vs_default": round(21 / 11, 4), "speedup_vs_shipped": round(16 / 11, 4),
         "shipped_vs_default": round(21 / 16, 4), "roofline": _figures(*A, 1, 11.0)},
        {"N": 7168, "K": 2048, "M": 16, "ours": _cell(FAST, 1, 12),
         "shipped": _cell(FAST, 16, 12), "default": _cell(D, None, 18), "noise_us": 1.2,
         "speedup_vs_default": round(19 / 13, 4), "speedup_vs_shipped": 1.0,
         "shipped_vs_default": round(19 / 13, 4), "roofline": _figures(*A, 16, 13.0)},
        {"N": 7168, "K": 2048, "M": 64, "ours": _cell(D, 64, 30),
         "shipped": _cell(S64, 64, 25), "default": _cell(D, None, 30), "noise_us": 1.2,
         "speedup_vs_default": 1.0, "speedup_vs_shipped": round(26 / 31, 4),
         "shipped_vs_default": round(31 / 26, 4), "roofline": _figures(*A, 64, 31.0)},
        {"N": 576, "K": 7168, "M": 1, "ours": None,
         "shipped": {"config": WRONG.as_dict(), "key_M": 1, "status": "wrong_result",
                     "latency_us": None, "error": "relative error 0.5 >= 0.01"},
         "default": _cell(D, None, 40), "noise_us": 1.2, "speedup_vs_default": None,
         "speedup_vs_shipped": None, "shipped_vs_default": None, "roofline": None},
        {"N": 576, "K": 7168, "M": 4096, "ours": None, "shipped": _cell(S4096, 4096, 300),
         "default": _cell(D, None, 200), "noise_us": 1.2, "speedup_vs_default": None,
         "speedup_vs_shipped": None, "shipped_vs_default": round(201 / 301, 4),
         "roofline": None},
    ]
    vs_default = [round(21 / 11, 4), round(19 / 13, 4), 1.0]
    vs_shipped = [round(16 / 11, 4), 1.0, round(26 / 31, 4)]
    shipped_default = [round(21 / 16, 4), round(19 / 13, 4), round(31 / 26, 4),
                       round(201 / 301, 4)]

    def geomean(values):
        return round(math.exp(sum(math.log(v) for v in values) / len(values)), 4)

    assert doc == {
        "benchmark": "vs_shipped", **meta,
        "summary": {
            "rows": 5, "shapes": 2,
            "geomean_speedup_vs_default": geomean(vs_default),
            "geomean_speedup_vs_shipped": geomean(vs_shipped),
            "geomean_shipped_vs_default": geomean(shipped_default),
            "ours_slower_than_default": [],
            "ours_slower_than_shipped": [[7168, 2048, 64]],  # 31 vs 26 us, noise 1.2 us
            "shipped_slower_than_default": [[576, 7168, 4096]],  # 301 vs 201 us
        },
        "rows": expected_rows,
    }
    table = vs.format_table(rows).splitlines()
    assert table[1].split() == ["7168", "2048", "1", "11.00", "1", "16.00", "21.00", "1.909x",
                                "1.454x", "33.4", "0.3"]  # 16 / 11 = 1.4545 rounds down
    assert table[4].split() == ["576", "7168", "1", "-", "-", "wrong_result", "41.00", "-", "-",
                                "-", "-"]


def test_a_timing_failure_is_recorded_and_the_run_goes_on(tmp_path):
    def broken(sample_us, configs, *, rounds):
        raise RuntimeError("CUDA graph capture failed")

    rows = vs.compare(_entries(tmp_path)[:1], lambda p: FakeRunner(p, []), rounds=3,
                      retime=broken)
    assert rows[0]["ours"] == {"config": FAST.as_dict(), "key_M": 1, "status": "ok",
                               "latency_us": None,
                               "error": "timing failed: RuntimeError: CUDA graph capture failed"}
    assert rows[0]["speedup_vs_default"] is None and rows[0]["noise_us"] is None


def _fill_store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    fast, slow = FAST.as_dict(), SLOW.as_dict()
    fill(url, {(*A, 1): [(D.as_dict(), True, "ok", 20.0), (fast, False, "ok", 10.0)],
               (*A, 64): [(D.as_dict(), True, "ok", 30.0), (slow, False, "ok", 35.0)]},
         device_name="NVIDIA_H200", m_values=(1, 64))
    return url


def test_dry_run_lists_what_would_be_timed(tmp_path, capsys):
    shipped = _write_shipped(tmp_path / "shipped")
    args = ["--dry-run", "--device", "H200", "--db", _fill_store(tmp_path), "--shipped-dir",
            str(shipped), "--shapes", "7168,2048", "--shapes", "1024,512", "--m", "1,16"]
    # The store's trials ran kernel abc123 on Triton 3.6: not the current kernel, left out.
    assert vs.main(args) == 0
    assert capsys.readouterr().out.splitlines() == [
        "NVIDIA_H200: 2 (shape, M) in 1 shape(s) with shipped files; no shipped file for "
        f"1024,512; our winners for 0 shape(s) (kernel {current_kernel_hash()[:12]}, Triton "
        f"{installed_triton_minor()})",
        "N=7168 K=2048 M=1: ours -; shipped 16x32x128 g64 w4 s4; default 64x128x128 g32 w4 s2",
        "N=7168 K=2048 M=16: ours -; shipped 16x64x128 g1 w4 s3; default 64x128x128 g32 w4 s2",
    ]
    assert vs.main([*args, "--allow-stale"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "NVIDIA_H200: 2 (shape, M) in 1 shape(s) with shipped files; no shipped file for "
        "1024,512; our winners for 1 shape(s) (any kernel and Triton: --allow-stale)",
        "N=7168 K=2048 M=1: ours 16x64x128 g1 w4 s3 (key 1); shipped 16x32x128 g64 w4 s4; "
        "default 64x128x128 g32 w4 s2",
        "N=7168 K=2048 M=16: ours 16x64x128 g1 w4 s3 (key 1); shipped 16x64x128 g1 w4 s3; "
        "default 64x128x128 g32 w4 s2",
    ]


@pytest.mark.parametrize("args, message", [
    (["--device", "H100", "--dry-run"], "no shipped files for H100 under"),
    (["--device", "H200", "--dry-run", "--db", "sqlite:////nonexistent/x.db"],
     "no store at /nonexistent/x.db"),
    ([], "no CUDA GPU visible: pass --device NAME"),
    (["--device", "H200", "--dry-run", "--tp", "3"], "model 'deepseek-v3' has no shapes for TP 3"),
    (["--device", "H200", "--rounds", "1", "--dry-run"], "--rounds must be at least 2, got 1"),
    (["--device", "H200"], "no visible GPU is H200 (visible: none); timing needs one"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, args, message):
    shipped = _write_shipped(tmp_path / "shipped")
    assert vs.main([*args, "--shipped-dir", str(shipped)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"vs_shipped: error: {message}") and err.count("\n") == 1


FIXTURES = REPO.parent / "shared" / "fixtures" / "vllm-0.33.0"


@pytest.mark.skipif(not (FIXTURES / "NVIDIA_H200").is_dir(), reason=f"no {FIXTURES}")
def test_dry_run_on_the_real_h200_files(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no tuner.db here: shipped and default only, with a warning
    assert vs.main(["--dry-run", "--device", "NVIDIA_H200", "--m", "1,4096"]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    # DeepSeek-V3 over TP 1, 2, 4, 8: 19 of its 33 (N, K) have an H200 file in vLLM 0.33.0.
    assert lines[0].startswith("NVIDIA_H200: 38 (shape, M) in 19 shape(s) with shipped files")
    assert len(lines) == 1 + 38
    assert lines[1] == ("N=576 K=7168 M=1: ours -; shipped 16x32x128 g64 w4 s4; "
                        "default 64x128x128 g32 w4 s2")
    assert "no store at tuner.db" in captured.err
    assert vs.main(["--dry-run", "--device", "NVIDIA_H200", "--tp", "8"]) == 0
    # TP 8: 14 shapes, all shipped for the H200, 18 M keys each
    assert capsys.readouterr().out.startswith("NVIDIA_H200: 252 (shape, M) in 14 shape(s)")


def test_gpu_run_wiring_with_fakes(tmp_path, capsys, monkeypatch):
    """The CUDA path of main() with the GPU parts replaced: what it writes, and where."""
    import json

    import torch

    import tuner.devices
    import tuner.measure
    import tuner.roofline
    import tuner.worker
    from tuner.devices import GpuInfo

    log = []
    env = {"gpu_name": "NVIDIA H200", "compute_capability": "9.0", "torch": "2.11.0",
           "triton": "3.6.0", "tuner": "0.1.0", "cuda": "12.8", "driver": "570.1",
           "kernel_hash": "abc"}
    monkeypatch.setattr(tuner.devices, "visible_gpus",
                        lambda: [GpuInfo(0, "0", "NVIDIA H200", "NVIDIA_H200", "9.0")])
    monkeypatch.setattr(torch.cuda, "set_device", lambda index: log.append(("device", index)))
    monkeypatch.setattr(tuner.worker, "collect_environment", lambda backend: env)
    monkeypatch.setattr(tuner.roofline, "measure_ceilings", lambda device: CEILINGS)
    monkeypatch.setattr(tuner.measure, "KernelRunner",
                        lambda problem, backend: FakeRunner(problem, log))
    out = tmp_path / "out.json"
    args = ["--db", _fill_store(tmp_path), "--shipped-dir", str(_write_shipped(tmp_path / "s")),
            "--shapes", "7168,2048", "--m", "1,64", "--rounds", "3", "--out", str(out),
            "--allow-stale"]
    assert vs.main(args) == 0
    assert log[0] == ("device", 0)
    doc = json.loads(out.read_text())
    assert doc["command"] == "python bench/vs_shipped.py " + " ".join(args)
    assert {k: doc[k] for k in ("benchmark", "device_name", "gpu_name", "compute_capability",
                                "backend", "shipped_files", "model", "tp", "shapes", "m",
                                "out_dtype", "block_shape", "rounds", "ceilings",
                                "winners_from")} == {
        "benchmark": "vs_shipped", "device_name": "NVIDIA_H200", "gpu_name": "NVIDIA H200",
        "compute_capability": "9.0", "backend": "cuda", "shipped_files": "s",
        "model": "deepseek-v3", "tp": None, "shapes": [[7168, 2048]], "m": [1, 64],
        "out_dtype": "bfloat16", "block_shape": [128, 128], "rounds": 3, "ceilings": CEILINGS,
        "winners_from": {"kernel_hash": None, "triton_minor": None}}
    assert doc["versions"] == {k: env[k] for k in ("torch", "triton", "tuner", "cuda", "driver",
                                                   "kernel_hash")}
    assert [(r["M"], r["ours"]["latency_us"], r["shipped"]["latency_us"],
             r["default"]["latency_us"]) for r in doc["rows"]] == [(1, 11.0, 16.0, 21.0),
                                                                   (64, 31.0, 26.0, 31.0)]
    assert doc["date"].endswith("+00:00")
    printed = capsys.readouterr().out
    assert "ceilings: copy 4,000 GB/s, FP8 mm 1,000.0 TFLOP/s" in printed
    assert f"wrote {out}" in printed
