"""Known NVIDIA GPUs and their compute capability, by the model part of vLLM's device_name, and
each architecture's shared memory per block: for checking entries without the GPU and for
naming a device's architecture."""

from __future__ import annotations

import re

# GPU model (as in vLLM's device_name, vendor prefix and memory suffixes dropped) -> compute
# capability as an int. Sources: NVIDIA's "CUDA GPU Compute Capability" list
# (developer.nvidia.com/cuda-gpus): L4, L20, L40, L40S and GeForce RTX 4090 are 8.9; H100 and
# H200 are 9.0; A100 is 8.0; A10 and A10G are 8.6. H20 (a Hopper part): 9.0, as reported in
# GitHub AIR-THU/UniV2X issue 8 ("H20 ... sm_90").
KNOWN_GPUS: dict[str, int] = {
    **dict.fromkeys(("L4", "L20", "L40", "L40S", "RTX_4090"), 89),
    **dict.fromkeys(("H100", "H200", "H20"), 90),
    **{"A100": 80, "A10": 86, "A10G": 86},
}

# Compute capability -> most shared memory one thread block may use (opt-in), in bytes: CUDA C++
# Programming Guide, "Technical Specifications per Compute Capability" (CUDA 12.x), in KiB:
# 101,376 B on sm89, 232,448 B on sm90, 166,912 B on sm80 (mirage-project/mirage PR 412
# measured sharedMemPerBlockOptin on L4, L40S, A100, H100 and H200 to the same figures).
MAX_SHARED_BYTES: dict[int, int] = {
    arch: kib * 1024
    for arch, kib in {80: 163, 86: 99, 87: 163, 89: 99, 90: 227, 100: 227, 120: 99}.items()
}


def gpu_model(device_name: str) -> str:
    """The model part of a vLLM device_name, as KNOWN_GPUS keys it.

    Args:
        device_name: e.g. "NVIDIA_H100_80GB_HBM3", "NVIDIA_A100-SXM4-80GB",
            "NVIDIA_GeForce_RTX_4090".

    Returns:
        e.g. "H100", "A100", "RTX_4090" (upper case); "" for a name without one.
    """
    name = re.sub(r"^(NVIDIA_)?(GEFORCE_)?", "", device_name.upper())
    parts = [part for part in re.split(r"[_\-]", name) if part]
    if len(parts) >= 2 and parts[0] == "RTX":
        return f"RTX_{parts[1]}"
    return parts[0] if parts else ""


def known_capability(device_name: str) -> int | None:
    """The compute capability (as an int: 89, 90) of the device's GPU model in KNOWN_GPUS, or
    None for a model not in the table."""
    return KNOWN_GPUS.get(gpu_model(device_name))
