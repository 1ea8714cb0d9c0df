"""Pull recipes with fused-MoE files: vLLM reads them from one folder named by
VLLM_TUNED_CONFIG_FOLDER, never from the dense configs folder; SGLang from its folder per
Triton version."""

from __future__ import annotations

import pytest

from tests.tuner.files.test_mounts import K8S_FLAG
from tuner.files.pull import render_pull_recipe
from tuner.kernels.dense.naming import config_file_name
from tuner.kernels.moe.naming import moe_config_file_name

SITE = "/usr/local/lib/python3.12/dist-packages"
DENSE = config_file_name(576, 7168, "NVIDIA_H200")
MOE = moe_config_file_name(128, 768, "NVIDIA_H200")
RELEASE = {
    "device_name": "NVIDIA_H200",
    "number": 3,
    "content_sha256": "ab" * 32,
    "files": [{"file_name": DENSE, "sha256": "1" * 64}, {"file_name": MOE, "sha256": "2" * 64}],
}
HEAD = [
    "# NVIDIA_H200 release 3 (2 file(s), content abababababab), pulled before {engine} starts "
    "and mounted read-only file by file.",
    "# tuner pull checks every sha256 and exits non-zero on a mismatch; {engine} reads dense "
    "files only from {site}/{dir}/",
]
VLLM_DIR = "vllm/model_executor/layers/quantization/utils/configs"
# The release names no compute capability: the table of known GPUs says sm90.
H200_ADVICE = [
    "# NVIDIA_H200 is sm90 (H200: compute capability 9.0, from the table of known GPUs).",
    "# vLLM 0.33.0's default kernel for block-FP8 linear layers there is DeepGEMM (FlashInfer",
    "# DeepGEMM where FlashInfer's kernels are installed or can be built), or CUTLASS where "
    "DeepGEMM",
    "# cannot run: these files are NOT read with default settings.",
    "# To have them read, start vLLM with --linear-backend triton (or",
    '# linear_backend_per_quant={"fp8_block_w8a8": "triton"}); VLLM_BATCH_INVARIANT=1 ignores the',
    "# files. Measure first: tuner compare times the tuned Triton kernel against the default "
    "kernels",
    "# on this GPU.",
    "# Fused-MoE files (E=...) are read by default here: vLLM moves its Triton MoE kernel first on",
    "# sm90 with 128x128 FP8 weights and ep_size 1.",
]


def test_k8s_pull_mounts_moe_files_as_one_folder_with_the_variable():
    text = render_pull_recipe(
        "k8s-pull", server="http://tuner:8000", release=RELEASE, engine="vllm", site_packages=SITE
    )
    assert text.splitlines() == [
        line.format(engine="vllm 0.33.0", site=SITE, dir=VLLM_DIR) for line in HEAD
    ] + [
        "# 1 fused-MoE file(s) (E=...): the whole volume mounted read-only at "
        "/opt/blockfp8-tuner/moe-configs/,",
        "# with VLLM_TUNED_CONFIG_FOLDER=/opt/blockfp8-tuner/moe-configs (vLLM reads MoE files "
        "there first).",
        *H200_ADVICE,
        "# blockfp8-tuner: docker build -t blockfp8-tuner . in the tuner's source (a cluster: "
        "tag and push it, e.g. docker tag blockfp8-tuner <registry>/blockfp8-tuner && docker "
        "push <registry>/blockfp8-tuner, and set image: to it).",
        "# In the pod spec:",
        "volumes:",
        "  - name: blockfp8-configs",
        "    emptyDir: {}",
        "initContainers:",
        "  - name: blockfp8-pull",
        "    image: blockfp8-tuner",
        '    command: ["tuner", "pull", "--server", "http://tuner:8000", "--device", '
        '"NVIDIA_H200", "--release", "3", "--engine", "vllm", "--out", "/configs"]',
        "    volumeMounts:",
        "      - name: blockfp8-configs",
        "        mountPath: /configs",
        "# In the serving container:",
        "volumeMounts:",
        "  - name: blockfp8-configs",
        f'    mountPath: "{SITE}/{VLLM_DIR}/{DENSE}"',
        f'    subPath: "{DENSE}"',
        "    readOnly: true",
        "  - name: blockfp8-configs",
        '    mountPath: "/opt/blockfp8-tuner/moe-configs"',
        "    readOnly: true",
        "env:",
        "  - name: VLLM_TUNED_CONFIG_FOLDER",
        '    value: "/opt/blockfp8-tuner/moe-configs"',
        *K8S_FLAG,
    ]
    assert MOE not in text  # no per-file mount of it into the dense folder


def test_compose_pull_mounts_the_volume_at_the_moe_folder():
    text = render_pull_recipe(
        "compose-pull",
        server="http://tuner:8000",
        release=RELEASE,
        engine="vllm",
        site_packages=SITE,
    )
    lines = text.splitlines()
    at = lines.index('        target: "/opt/blockfp8-tuner/moe-configs"')
    assert lines[at - 2 : at + 4] == [
        "      - type: volume",
        "        source: blockfp8-configs",
        '        target: "/opt/blockfp8-tuner/moe-configs"',
        "        read_only: true",
        "    environment:",
        '      VLLM_TUNED_CONFIG_FOLDER: "/opt/blockfp8-tuner/moe-configs"',
    ]
    assert lines[-2:] == ["volumes:", "  blockfp8-configs: {}"]
    assert [line for line in lines if "subpath" in line] == [f'          subpath: "{DENSE}"']


SGL_SITE = "/sgl-workspace/sglang/python"
SGL_DENSE = DENSE.replace("[128,128]", "[128, 128]")
SGL_MOE = MOE.replace("[128,128]", "[128, 128]")


def test_sglang_k8s_pull_mounts_moe_files_in_the_folder_of_the_releases_triton():
    release = {**RELEASE, "summary": {"versions": {"triton": ["3.8.0"]}}}
    text = render_pull_recipe(
        "k8s-pull",
        server="http://tuner:8000",
        release=release,
        engine="sglang",
        site_packages=SGL_SITE,
    )
    moe_dir = f"{SGL_SITE}/sglang/srt/layers/moe/moe_runner/triton_utils/configs/triton_3_8_0"
    lines = text.splitlines()
    assert lines[:4] == [
        line.format(engine="sglang 0.5.23", site=SGL_SITE, dir="sglang/kernels/ops/gemm/configs")
        for line in HEAD
    ] + [
        f"# 1 fused-MoE file(s) (E=...) in {moe_dir}/:",
        "# SGLang's folder for Triton 3.8.0 (the one the release was tuned with; it must be the "
        "serving image's).",
    ]
    at = lines.index("# In the serving container:")
    assert lines[at:] == [
        "# In the serving container:",
        "volumeMounts:",
        "  - name: blockfp8-configs",
        f'    mountPath: "{moe_dir}/{SGL_MOE}"',
        f'    subPath: "{SGL_MOE}"',
        "    readOnly: true",
        "  - name: blockfp8-configs",
        f'    mountPath: "{SGL_SITE}/sglang/kernels/ops/gemm/configs/{SGL_DENSE}"',
        f'    subPath: "{SGL_DENSE}"',
        "    readOnly: true",
    ]


def test_sglang_compose_pull_takes_the_engine_and_triton_versions_given():
    text = render_pull_recipe(
        "compose-pull",
        server="http://tuner:8000",
        release=RELEASE,
        engine="sglang",
        site_packages=SGL_SITE,
        engine_version_="0.5.10",
        triton_version="3.4.0",
    )
    targets = [line for line in text.splitlines() if "target:" in line]
    assert targets == [
        f'        target: "{SGL_SITE}/sglang/srt/layers/moe/fused_moe_triton/configs/'
        f'triton_3_4_0/{SGL_MOE}"',
        f'        target: "{SGL_SITE}/sglang/srt/layers/quantization/configs/{SGL_DENSE}"',
    ]
    assert "  sglang:  # your serving service" in text.splitlines()


def test_sglang_pull_recipe_without_a_triton_version_is_refused():
    with pytest.raises(ValueError, match="give the serving image's Triton"):
        render_pull_recipe(
            "k8s-pull",
            server="http://tuner:8000",
            release=RELEASE,
            engine="sglang",
            site_packages=SGL_SITE,
        )


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
