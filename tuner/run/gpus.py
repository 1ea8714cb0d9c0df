"""The CUDA GPUs this process can see, with vLLM's device_name of each: what `--device` picks
workers' GPUs from."""

from __future__ import annotations

import os

from tuner.core import GpuInfo, vllm_device_name


def visible_gpus() -> list[GpuInfo]:
    """The CUDA GPUs this process can see, honouring CUDA_VISIBLE_DEVICES; empty without CUDA."""
    import torch  # deferred: the API and `tuner --help` never load torch

    if not torch.cuda.is_available():
        return []
    listed = [part.strip() for part in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")]
    gpus = []
    for index in range(torch.cuda.device_count()):
        name = torch.cuda.get_device_name(index)
        major, minor = torch.cuda.get_device_capability(index)
        visible_id = listed[index] if index < len(listed) and listed[index] else str(index)
        gpus.append(GpuInfo(index, visible_id, name, vllm_device_name(name), f"{major}.{minor}"))
    return gpus
