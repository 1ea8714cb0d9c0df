"""vLLM 0.33.0's `get_device_name_as_file_name` (vllm/utils/platform_utils.py) against the
tuner's device-name rule (`tuner.core.vllm_device_name`, what a sweep stores and
every file name carries) on the names real GPUs report."""

from __future__ import annotations

from tests.engines.container import Platform
from tests.engines.vllm_host import device_name_rule
from tuner.core import is_device_name, vllm_device_name

# As NVML / torch.cuda.get_device_name (and ROCm, XPU) name them; the last two as OpenGL
# renderer strings do, with "/" in them.
GPU_NAMES = {
    "NVIDIA L20": "NVIDIA_L20",
    "NVIDIA L40S": "NVIDIA_L40S",
    "NVIDIA GeForce RTX 4090": "NVIDIA_GeForce_RTX_4090",
    "NVIDIA H100 80GB HBM3": "NVIDIA_H100_80GB_HBM3",
    "NVIDIA H100 PCIe": "NVIDIA_H100_PCIe",
    "NVIDIA H200": "NVIDIA_H200",
    "NVIDIA H200 NVL": "NVIDIA_H200_NVL",
    "NVIDIA GH200 480GB": "NVIDIA_GH200_480GB",
    "NVIDIA H20": "NVIDIA_H20",
    "NVIDIA B200": "NVIDIA_B200",
    "NVIDIA A100-SXM4-80GB": "NVIDIA_A100-SXM4-80GB",
    "NVIDIA RTX PRO 6000 Blackwell Server Edition": "NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition",
    "AMD Instinct MI300X": "AMD_Instinct_MI300X",
    "Intel(R) Data Center GPU Max 1550": "Intel(R)_Data_Center_GPU_Max_1550",
    "NVIDIA GeForce GTX 1080/PCIe/SSE2": "NVIDIA_GeForce_GTX_1080_PCIe_SSE2",
    "Quadro RTX 6000/PCIe": "Quadro_RTX_6000_PCIe",
}


def test_vllms_rule_and_ours_name_every_gpu_alike(vllm_wheel, monkeypatch) -> None:
    platform = Platform("")
    rule = device_name_rule(vllm_wheel, monkeypatch, platform)
    theirs = {}
    for gpu in GPU_NAMES:
        platform.gpu_name = gpu
        rule.cache_clear()
        theirs[gpu] = rule(0)
    assert theirs == GPU_NAMES
    assert {gpu: vllm_device_name(gpu) for gpu in GPU_NAMES} == GPU_NAMES
    assert all(is_device_name(key) for key in GPU_NAMES.values())
