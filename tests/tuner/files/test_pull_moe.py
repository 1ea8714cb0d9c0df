"""Pull recipes with fused-MoE files: vLLM reads them from one folder named by
VLLM_TUNED_CONFIG_FOLDER, never from the dense configs folder."""

from __future__ import annotations

from tuner.files.pull import render_pull_recipe
from tuner.kernels.dense.naming import config_file_name
from tuner.kernels.moe.naming import moe_config_file_name

SITE = "/usr/local/lib/python3.12/dist-packages"
DENSE = config_file_name(576, 7168, "NVIDIA_H200")
MOE = moe_config_file_name(128, 768, "NVIDIA_H200")
RELEASE = {"device_name": "NVIDIA_H200", "number": 3, "content_sha256": "ab" * 32,
           "files": [{"file_name": DENSE, "sha256": "1" * 64},
                     {"file_name": MOE, "sha256": "2" * 64}]}
HEAD = [
    "# NVIDIA_H200 release 3 (2 file(s), content abababababab), pulled before {engine} starts "
    "and mounted read-only file by file.",
    "# tuner pull checks every sha256 and exits non-zero on a mismatch; the engine reads the "
    "files only from {site}/{dir}/",
]
VLLM_DIR = "vllm/model_executor/layers/quantization/utils/configs"


def test_k8s_pull_mounts_moe_files_as_one_folder_with_the_variable():
    text = render_pull_recipe("k8s-pull", server="http://tuner:8000", release=RELEASE,
                              engine="vllm", site_packages=SITE)
    assert text.splitlines() == [line.format(engine="vllm", site=SITE, dir=VLLM_DIR)
                                 for line in HEAD] + [
        "# 1 fused-MoE file(s) (E=...): the whole volume mounted read-only at "
        "/opt/blockfp8-tuner/moe-configs/,",
        "# with VLLM_TUNED_CONFIG_FOLDER=/opt/blockfp8-tuner/moe-configs (vLLM reads MoE files "
        "there first).",
        "# In the pod spec:", "volumes:", "  - name: blockfp8-configs", "    emptyDir: {}",
        "initContainers:", "  - name: blockfp8-pull", "    image: blockfp8-tuner",
        '    command: ["tuner", "pull", "--server", "http://tuner:8000", "--device", '
        '"NVIDIA_H200", "--release", "3", "--engine", "vllm", "--out", "/configs"]',
        "    volumeMounts:", "      - name: blockfp8-configs", "        mountPath: /configs",
        "# In the serving container:", "volumeMounts:",
        "  - name: blockfp8-configs", f'    mountPath: "{SITE}/{VLLM_DIR}/{DENSE}"',
        f'    subPath: "{DENSE}"', "    readOnly: true",
        "  - name: blockfp8-configs", '    mountPath: "/opt/blockfp8-tuner/moe-configs"',
        "    readOnly: true",
        "env:", "  - name: VLLM_TUNED_CONFIG_FOLDER",
        '    value: "/opt/blockfp8-tuner/moe-configs"',
    ]
    assert MOE not in text  # no per-file mount of it into the dense folder


def test_compose_pull_mounts_the_volume_at_the_moe_folder():
    text = render_pull_recipe("compose-pull", server="http://tuner:8000", release=RELEASE,
                              engine="vllm", site_packages=SITE)
    lines = text.splitlines()
    at = lines.index('        target: "/opt/blockfp8-tuner/moe-configs"')
    assert lines[at - 2:at + 4] == [
        "      - type: volume", "        source: blockfp8-configs",
        '        target: "/opt/blockfp8-tuner/moe-configs"', "        read_only: true",
        "    environment:", '      VLLM_TUNED_CONFIG_FOLDER: "/opt/blockfp8-tuner/moe-configs"']
    assert lines[-2:] == ["volumes:", "  blockfp8-configs: {}"]
    assert [line for line in lines if "subpath" in line] == [f'          subpath: "{DENSE}"']


def test_sglang_pull_recipes_leave_moe_files_unmounted_and_say_so():
    for fmt in ("k8s-pull", "compose-pull"):
        text = render_pull_recipe(fmt, server="http://tuner:8000", release=RELEASE,
                                  engine="sglang", site_packages=SITE)
        assert text.splitlines()[2] == (
            "# 1 fused-MoE file(s) (E=...) pulled but not mounted: SGLang does not read them "
            "from VLLM_TUNED_CONFIG_FOLDER; these mounts cover the dense files only.")
        assert "E=" not in text.split("\n", 3)[3]
        assert "VLLM_TUNED_CONFIG_FOLDER" not in text.split("\n", 3)[3]
