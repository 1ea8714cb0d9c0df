"""bench/dedisp_landscapes.py: how a config maps onto Kernel Tuner's dedispersion parameters."""

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
sys.path.insert(0, str(REPO / "bench"))
SPEC = importlib.util.spec_from_file_location(
    "dedisp_landscapes", REPO / "bench" / "dedisp_landscapes.py"
)
dedisp = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(dedisp)


def test_a_config_is_one_dedispersion_config_and_m_16_takes_other_tile_heights():
    # vLLM's default 64x128x128 g32 w4 s2: block 8 x 128 x 1, tile 3 x 1, stride_x 1 (K 128),
    # stride_y 0 (4 warps)
    assert dedisp.kt_keys(default_config(), 1) == ["8,128,1,3,1,1,0,0"]
    assert dedisp.kt_keys(KernelConfig(256, 32, 64, 1, 8, 5), 1) == ["32,32,1,1,8,0,1,0"]
    assert dedisp.kt_keys(KernelConfig(256, 32, 64, 1, 8, 5), 16) == ["32,32,1,1,4,0,1,0"]


def test_the_cache_is_read_in_microseconds_and_checked_for_its_parameters(tmp_path: Path):
    key = dedisp.kt_keys(default_config(), 1)[0]
    body = {
        "tune_params_keys": list(dedisp.KT_KEYS),
        "kernel_name": "dedispersion_kernel",
        "cache": {
            key: {"time": 2.0, "times": [1.0, 2.0, 3.0, 4.0, 5.0]},
            "1,32,1,1,1,0,0,0": {"time": "InvalidConfig"},
        },
    }
    path = tmp_path / "A100.json.gz"
    path.write_bytes(gzip.compress(json.dumps(body).encode()))
    cache = dedisp.read_cache(path, dedisp.KT_KEYS)
    landscape = dedisp.build({1: cache}, dedisp.kt_keys, "KT_DEDISP", "dedispersion")
    at_1 = landscape.problems[(1, 4096, 1)]
    assert list(at_1) == [default_config()] and at_1[default_config()].latency_us == 3000.0
    assert landscape.device_name == "KT_DEDISP"
    with pytest.raises(ValueError, match="dedispersion_kernel with the parameters"):
        dedisp.read_cache(path)  # the convolution's parameters
