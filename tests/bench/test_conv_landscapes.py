"""bench/conv_landscapes.py: how a config maps onto Kernel Tuner's convolution parameters."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.space import default_config

REPO = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location(
    "conv_landscapes", REPO / "bench" / "conv_landscapes.py"
)
conv = importlib.util.module_from_spec(SPEC)
sys.modules["conv_landscapes"] = conv
SPEC.loader.exec_module(conv)


def test_a_config_stands_for_both_padding_choices_and_m_16_swaps_the_tile_sizes():
    # vLLM's default 64x128x128 g32 w4 s2: block 128 x 4, tile_size_x 3 (g32), tile_size_y 1
    # (2 stages), read_only 1 (BLOCK_SIZE_K 128), no shared memory (4 warps)
    assert conv.kt_keys(default_config(), 1) == [
        "128,4,3,1,1,0,0,1,15,15",
        "128,4,3,1,1,1,0,1,15,15",
    ]
    assert conv.kt_keys(default_config(), 16)[0] == "128,4,1,3,1,0,0,1,15,15"
    assert conv.kt_keys(KernelConfig(256, 32, 64, 1, 8, 5), 1)[0] == "32,16,1,4,0,0,1,1,15,15"


def test_the_faster_padding_choice_is_kept_and_configs_without_timings_are_left_out():
    fast, slow = conv.kt_keys(default_config(), 1)
    cache = {
        fast: [1.0, 1.1, 1.2, 1.3, 1.4],
        slow: [2.0] * 5,
        conv.kt_keys(default_config(), 16)[1]: [3.0] * 5,
    }
    landscape = conv.build({2: cache})
    assert sorted(landscape.problems) == [(2, 4096, 1), (2, 4096, 16)]
    # 64x128x128 g1 w4 s4 stands for tile_size_x 1, tile_size_y 3 at M 1: the third entry
    swapped = KernelConfig(64, 128, 128, 1, 4, 4)
    at_1 = {c: r.latency_us for c, r in landscape.problems[(2, 4096, 1)].items()}
    at_16 = {c: r.latency_us for c, r in landscape.problems[(2, 4096, 16)].items()}
    assert at_1 == {default_config(): 1200.0, swapped: 3000.0}
    assert at_16 == {default_config(): 3000.0, swapped: 1200.0}
