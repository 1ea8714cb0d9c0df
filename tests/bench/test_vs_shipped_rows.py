"""bench/vs_shipped.py's rows: shipped files read, our merged configs picked as vLLM would,
every config checked then re-timed interleaved with fake timings, and the result document
checked exactly."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.bench.shippedfakes import (
    CEILINGS,
    FAST,
    S1,
    S64,
    S4096,
    SHIPPED,
    WINNERS,
    WRONG,
    A,
    B,
    D,
    FakeRunner,
    write_shipped,
)
from tests.bench.test_vs_shipped import vs as core
from tuner.measure.roofline import gemm_bytes, gemm_flops


def _entries(tmp_path: Path):
    shipped = core.read_shipped(write_shipped(tmp_path / "shipped"), "NVIDIA_H200")
    return core.plan(shipped, core.our_files(WINNERS), [A, (1024, 512), B])


def test_shipped_files_and_our_merged_configs(tmp_path):
    shipped = core.read_shipped(write_shipped(tmp_path / "shipped"), "NVIDIA_H200")
    assert shipped == {k: {M: c.as_dict() for M, c in v.items()} for k, v in SHIPPED.items()}
    assert core.our_files(WINNERS) == {A: {1: FAST.as_dict(), 64: D.as_dict()}}
    with pytest.raises(
        ValueError,
        match=r"no shipped files for NVIDIA_H100 under .* \(devices "
        r"there: NVIDIA_H200, NVIDIA_L20\)",
    ):
        core.read_shipped(tmp_path / "shipped", "NVIDIA_H100")


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
    files = core.read_shipped(tmp_path / "shipped", "NVIDIA_H200")
    assert [e.M for e in core.plan(files, {}, [A], m_values=[16, 4096])] == [16]


def _cell(config, key, base):
    return {
        "config": config.as_dict(),
        "key_M": key,
        "status": "ok",
        "latency_us": base + 1.0,
        "p20_us": base + 0.4,
        "p80_us": base + 1.6,
        "rounds": 3,
    }


def _figures(N, K, M, us):
    gbps, tflops = gemm_bytes(M, N, K) / us / 1e3, gemm_flops(M, N, K) / us / 1e6
    return {
        "gbps": round(gbps, 1),
        "tflops": round(tflops, 2),
        "copy_ratio": round(gbps / 4000, 4),
        "fp8_mm_ratio": round(tflops / 1000, 4),
        "bound": "memory",
    }


def test_one_interleaved_run_per_m_and_the_exact_json(tmp_path):
    log = []
    rows = core.compare(
        _entries(tmp_path), lambda problem: FakeRunner(problem, log), rounds=3, ceilings=CEILINGS
    )
    # M=1 of A: three distinct configs, checked first, then A B C / B C A / C A B.
    first = [(kind, c) for kind, M, c in log[:12]]
    assert first == [
        ("check", FAST),
        ("check", S1),
        ("check", D),
        ("sample", FAST),
        ("sample", S1),
        ("sample", D),
        ("sample", S1),
        ("sample", D),
        ("sample", FAST),
        ("sample", D),
        ("sample", FAST),
        ("sample", S1),
    ]
    assert sum(1 for kind, M, c in log if kind == "sample" and c == WRONG) == 0
    meta = {
        "date": "2026-11-30T00:00:00+00:00",
        "command": "python bench/vs_shipped.py",
        "device_name": "NVIDIA_H200",
        "versions": {"torch": "2.11.0", "triton": "3.6.0"},
        "ceilings": CEILINGS,
    }
    doc = core.result_doc(rows, meta)
    expected_rows = [
        {
            "N": 7168,
            "K": 2048,
            "M": 1,
            "ours": _cell(FAST, 1, 10),
            "shipped": _cell(S1, 1, 15),
            "default": _cell(D, None, 20),
            "noise_us": 1.2,
            "speedup_vs_default": round(21 / 11, 4),
            "speedup_vs_shipped": round(16 / 11, 4),
            "shipped_vs_default": round(21 / 16, 4),
            "roofline": _figures(*A, 1, 11.0),
        },
        {
            "N": 7168,
            "K": 2048,
            "M": 16,
            "ours": _cell(FAST, 1, 12),
            "shipped": _cell(FAST, 16, 12),
            "default": _cell(D, None, 18),
            "noise_us": 1.2,
            "speedup_vs_default": round(19 / 13, 4),
            "speedup_vs_shipped": 1.0,
            "shipped_vs_default": round(19 / 13, 4),
            "roofline": _figures(*A, 16, 13.0),
        },
        {
            "N": 7168,
            "K": 2048,
            "M": 64,
            "ours": _cell(D, 64, 30),
            "shipped": _cell(S64, 64, 25),
            "default": _cell(D, None, 30),
            "noise_us": 1.2,
            "speedup_vs_default": 1.0,
            "speedup_vs_shipped": round(26 / 31, 4),
            "shipped_vs_default": round(31 / 26, 4),
            "roofline": _figures(*A, 64, 31.0),
        },
        {
            "N": 576,
            "K": 7168,
            "M": 1,
            "ours": None,
            "shipped": {
                "config": WRONG.as_dict(),
                "key_M": 1,
                "status": "wrong_result",
                "latency_us": None,
                "error": "relative error 0.5 >= 0.01",
            },
            "default": _cell(D, None, 40),
            "noise_us": 1.2,
            "speedup_vs_default": None,
            "speedup_vs_shipped": None,
            "shipped_vs_default": None,
            "roofline": None,
        },
        {
            "N": 576,
            "K": 7168,
            "M": 4096,
            "ours": None,
            "shipped": _cell(S4096, 4096, 300),
            "default": _cell(D, None, 200),
            "noise_us": 1.2,
            "speedup_vs_default": None,
            "speedup_vs_shipped": None,
            "shipped_vs_default": round(201 / 301, 4),
            "roofline": None,
        },
    ]
    vs_default = [round(21 / 11, 4), round(19 / 13, 4), 1.0]
    vs_shipped = [round(16 / 11, 4), 1.0, round(26 / 31, 4)]
    shipped_default = [round(21 / 16, 4), round(19 / 13, 4), round(31 / 26, 4), round(201 / 301, 4)]

    def geomean(values):
        return round(math.exp(sum(math.log(v) for v in values) / len(values)), 4)

    assert doc == {
        "benchmark": "vs_shipped",
        **meta,
        "summary": {
            "rows": 5,
            "shapes": 2,
            "geomean_speedup_vs_default": geomean(vs_default),
            "geomean_speedup_vs_shipped": geomean(vs_shipped),
            "geomean_shipped_vs_default": geomean(shipped_default),
            "ours_slower_than_default": [],
            "ours_slower_than_shipped": [[7168, 2048, 64]],  # 31 vs 26 us, noise 1.2 us
            "shipped_slower_than_default": [[576, 7168, 4096]],  # 301 vs 201 us
        },
        "rows": expected_rows,
    }
    table = core.format_table(rows).splitlines()
    assert table[1].split() == [
        "7168",
        "2048",
        "1",
        "11.00",
        "1",
        "16.00",
        "21.00",
        "1.909x",
        "1.454x",
        "33.4",
        "0.3",
    ]  # 16 / 11 = 1.4545 rounds down
    assert table[4].split() == [
        "576",
        "7168",
        "1",
        "-",
        "-",
        "wrong_result",
        "41.00",
        "-",
        "-",
        "-",
        "-",
    ]


def test_a_timing_failure_is_recorded_and_the_run_goes_on(tmp_path):
    def broken(sample_us, configs, *, rounds):
        raise RuntimeError("CUDA graph capture failed")

    rows = core.compare(
        _entries(tmp_path)[:1], lambda p: FakeRunner(p, []), rounds=3, retime=broken
    )
    assert rows[0]["ours"] == {
        "config": FAST.as_dict(),
        "key_M": 1,
        "status": "ok",
        "latency_us": None,
        "error": "timing failed: RuntimeError: CUDA graph capture failed",
    }
    assert rows[0]["speedup_vs_default"] is None and rows[0]["noise_us"] is None


def test_a_shipped_config_our_kernel_refuses_is_invalid_and_never_launched():
    from tuner.kernels.config import KernelConfig
    from tuner.kernels.dense.space import default_config

    refused = KernelConfig(64, 128, 256, 32, 4, 2)  # BLOCK_SIZE_K 256 does not divide 128
    entry = core.Entry(
        N=256, K=384, M=16, shipped=refused, default=default_config(), ours=None, ours_key=None
    )
    log = []

    class Runner:
        def check(self, config):
            log.append(("check", config))
            return core.TrialResult(core.TrialStatus.OK, rel_error=1e-3)

        def sample_us(self, config):
            log.append(("sample", config))
            return 10.0

    [row] = core.compare([entry], lambda problem: Runner(), rounds=2)
    assert row["shipped"]["status"] == "invalid" and row["shipped"]["latency_us"] is None
    assert "BLOCK_SIZE_K" in row["shipped"]["error"]
    assert [config for _, config in log] == [default_config()] * 3  # checked, 2 samples
    assert row["default"]["latency_us"] == 10.0 and row["shipped_vs_default"] is None
