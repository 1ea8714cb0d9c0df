"""bench/kt_landscapes.py: how a config maps onto Kernel Tuner's Xgemm parameters, exactly."""

from __future__ import annotations

import gzip
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.space import default_config

REPO = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("kt_landscapes", REPO / "bench" / "kt_landscapes.py")
kt = importlib.util.module_from_spec(SPEC)
sys.modules["kt_landscapes"] = kt
SPEC.loader.exec_module(kt)

# vLLM's default 64x128x128 g32 w4 s2 under `fixed` at M=1: MWG 64, NWG 64, MDIMC x NDIMC 8x16,
# MDIMA = NDIMB = 16, VWM 1, VWN 1, SA 1, SB 0 (the 15 Kernel Tuner keys in their order)
DEFAULT_FIXED_M1 = "64,64,32,8,16,16,16,2,1,1,0,0,1,0,32"


def test_fixed_maps_a_config_to_exactly_one_kernel_tuner_config():
    [params] = kt.MAPPINGS["fixed"](default_config(), 1)
    assert kt.kt_key(params) == DEFAULT_FIXED_M1
    [params] = kt.MAPPINGS["fixed"](KernelConfig(16, 256, 64, 1, 8, 5), 4096)
    assert kt.kt_key(params) == "16,128,32,16,16,8,8,2,8,8,0,0,0,0,32"


def test_min_takes_the_fastest_hidden_choice_and_unrunnable_configs_are_left_out():
    candidates = [kt.kt_key(p) for p in kt.MAPPINGS["min"](default_config(), 16)]
    # 4 warps = 128 threads as 16x8 (M 16: MDIMC >= NDIMC), 9 loading shapes, SA 1, SB 0
    assert len(candidates) == 9 and candidates[0] == "64,64,32,16,8,8,8,2,1,4,0,0,1,0,32"
    cache = {candidates[3]: [2.0] * 5, candidates[7]: [1.0, 1.1, 1.2, 1.3, 1.4]}
    landscape = kt.build("min", {2: cache})
    assert sorted(landscape.problems) == [(2, 4096, 16)]  # no other variant has a row
    assert list(landscape.problems[(2, 4096, 16)]) == [default_config()]
    result = landscape.problems[(2, 4096, 16)][default_config()]
    assert (result.status.value, result.latency_us) == ("ok", pytest.approx(1200.0))
    assert (result.p20_us, result.p80_us) == (pytest.approx(1020.0), pytest.approx(1380.0))


def test_read_cache_refuses_another_kernel(tmp_path):
    path = tmp_path / "conv.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"tune_params_keys": ["a"], "cache": {}}).encode()))
    with pytest.raises(ValueError, match="conv.json.gz: not a Kernel Tuner Xgemm cache file"):
        kt.read_cache(path)
