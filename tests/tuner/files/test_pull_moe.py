"""`tuner pull` for SGLang writes fused-MoE files without the "triton_version" key its loader
cannot read."""

from __future__ import annotations

from tuner.kernels.dense.family import config_file_name
from tuner.kernels.moe.family import moe_config_file_name

DENSE = config_file_name(576, 7168, "NVIDIA_H200")
MOE = moe_config_file_name(128, 768, "NVIDIA_H200")
SGL_MOE = MOE.replace("[128,128]", "[128, 128]")


def test_sglang_pull_writes_moe_files_without_the_triton_version_key(tmp_path):
    import hashlib
    import json

    from tuner.files.format import dump_config_file
    from tuner.files.pull import MARKER, holds, replace_folder

    entry = {
        "BLOCK_SIZE_M": 16,
        "BLOCK_SIZE_N": 128,
        "BLOCK_SIZE_K": 128,
        "GROUP_SIZE_M": 1,
        "num_warps": 4,
        "num_stages": 3,
    }
    released = dump_config_file({1: entry, 64: entry}, triton_version="3.8.0").encode()
    assert released.startswith(b'{\n    "triton_version": "3.8.0",\n    "1": {')
    release = {
        "device_name": "NVIDIA_H200",
        "number": 3,
        "content_sha256": "ab" * 32,
        "files": [{"file_name": MOE, "sha256": hashlib.sha256(released).hexdigest()}],
    }
    written, removed = replace_folder(tmp_path, release, "sglang", {MOE: released})
    assert (written, removed) == ([SGL_MOE], [])
    expected = dump_config_file({1: entry, 64: entry}).encode()
    assert (tmp_path / SGL_MOE).read_bytes() == expected  # SGLang int()s every key it reads
    marker = json.loads((tmp_path / MARKER).read_text())
    assert marker["written"] == {SGL_MOE: hashlib.sha256(expected).hexdigest()}
    assert holds(tmp_path, release, "sglang") and not holds(tmp_path, release, "vllm")
    (tmp_path / SGL_MOE).write_bytes(released)
    assert not holds(tmp_path, release, "sglang")
    vllm_dir = tmp_path / "vllm"
    replace_folder(vllm_dir, release, "vllm", {MOE: released})
    assert (vllm_dir / MOE).read_bytes() == released  # vLLM's get_moe_configs drops the key
    assert json.loads((vllm_dir / MARKER).read_text())["written"] == {}
    assert holds(vllm_dir, release, "vllm")
