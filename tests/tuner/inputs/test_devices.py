"""vLLM device names and how `--device` arguments match them."""

import pytest

from tuner.inputs.devices import matches, resolve, vllm_device_name


@pytest.mark.parametrize(
    ("gpu_name", "device_name"),
    [
        ("NVIDIA L20", "NVIDIA_L20"),
        ("NVIDIA H100 80GB HBM3", "NVIDIA_H100_80GB_HBM3"),  # as in vLLM's shipped file names
        ("AMD Instinct MI300X", "AMD_Instinct_MI300X"),
        ("NVIDIA A100-SXM4-80GB", "NVIDIA_A100-SXM4-80GB"),
        ("NVIDIA  RTX 6000/Ada ", "NVIDIA_RTX_6000_Ada"),
    ],
)
def test_vllm_device_name(gpu_name, device_name):
    assert vllm_device_name(gpu_name) == device_name


def test_matches():
    assert matches("L20", "NVIDIA_L20")
    assert matches("nvidia_l20", "NVIDIA_L20")
    assert matches("NVIDIA L20", "NVIDIA_L20")
    assert not matches("L20", "NVIDIA_L20S")
    assert not matches("L20", "TRITON_INTERPRETER")
    assert matches("interpreter", "TRITON_INTERPRETER")


def test_resolve():
    known = ["NVIDIA_L20", "NVIDIA_L40S", "TRITON_INTERPRETER"]
    assert resolve("L40S", known) == ["NVIDIA_L40S"]
    assert resolve("H200", known) == []
