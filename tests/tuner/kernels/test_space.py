"""The config space: vLLM's grid, its default config and the constraint checks."""

from collections import Counter

import pytest

from tuner.core import CONFIG_KEYS
from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.space import default_config, vllm_space, why_invalid


def test_vllm_space_is_the_1280_config_grid_in_script_order():
    space = vllm_space()
    assert len(space) == 1280 == len(set(space))
    # benchmark_w8a8_block_fp8.py nests num_stages outermost and GROUP_SIZE_M innermost.
    assert space[0] == KernelConfig(16, 32, 64, 1, 4, 2)
    assert space[1] == KernelConfig(16, 32, 64, 16, 4, 2)
    assert space[-1] == KernelConfig(256, 256, 128, 64, 8, 5)
    assert Counter(c.BLOCK_SIZE_M for c in space) == {16: 256, 32: 256, 64: 256, 128: 256, 256: 256}
    assert Counter(c.num_stages for c in space) == {2: 320, 3: 320, 4: 320, 5: 320}


def test_default_config_is_vllms_and_lies_in_the_space():
    default = default_config((128, 128))
    assert default.as_dict() == {
        "BLOCK_SIZE_M": 64,
        "BLOCK_SIZE_N": 128,
        "BLOCK_SIZE_K": 128,
        "GROUP_SIZE_M": 32,
        "num_warps": 4,
        "num_stages": 2,
    }
    assert list(default.as_dict()) == list(CONFIG_KEYS)
    assert default in vllm_space()
    assert default_config((64, 64)).BLOCK_SIZE_K == 64


def test_every_vllm_config_passes_for_128x128_blocks():
    assert [c for c in vllm_space() if why_invalid(c, (128, 128))] == []


@pytest.mark.parametrize(
    ("config", "reason"),
    [
        (KernelConfig(64, 128, 256, 32, 4, 2), "BLOCK_SIZE_K=256 does not divide group_k=128"),
        (KernelConfig(48, 128, 128, 32, 4, 2), "BLOCK_SIZE_M=48 is not a power of two >= 16"),
        (KernelConfig(64, 8, 128, 32, 4, 2), "BLOCK_SIZE_N=8 is not a power of two >= 16"),
        (KernelConfig(64, 128, 128, 32, 6, 2), "num_warps=6 is not a power of two <= 32"),
    ],
)
def test_constraints_give_their_reason(config, reason):
    assert why_invalid(config, (128, 128)) == reason


def test_from_dict_checks_keys_and_values():
    default = default_config()
    assert KernelConfig.from_dict({**default.as_dict(), "kpack": 2}) == default
    with pytest.raises(ValueError, match="lacks num_stages"):
        KernelConfig.from_dict({k: 1 for k in CONFIG_KEYS[:-1]})
    with pytest.raises(ValueError, match="num_warps must be a positive integer"):
        KernelConfig.from_dict({**default.as_dict(), "num_warps": True})
    with pytest.raises(ValueError, match="BLOCK_SIZE_M must be a positive integer"):
        KernelConfig.from_dict({**default.as_dict(), "BLOCK_SIZE_M": "64"})
