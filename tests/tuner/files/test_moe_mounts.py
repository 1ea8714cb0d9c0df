"""Mount recipes with fused-MoE files: for vLLM one read-only folder mount and
VLLM_TUNED_CONFIG_FOLDER (vLLM's get_moe_configs reads it first); for SGLang each file in its
folder for the serving image's Triton; dense files per file as before."""

from __future__ import annotations

import pytest

from tests.tuner.files.test_mounts import VLLM, A, body, request
from tuner.files.mounts import MOE_CONTAINER_DIR, config_files_in, render_mounts

MOE = "E=128,N=384,device_name=NVIDIA_L20,dtype=fp8_w8a8,block_shape=[128,128].json"
DIR = "/opt/blockfp8-tuner/moe-configs"


def test_docker_moe_folder_and_env() -> None:
    assert MOE_CONTAINER_DIR == DIR
    text = render_mounts(request(file_names=(MOE, A)))
    assert body(text) == [
        f'  -v "$PWD/configs/{A}:{VLLM}/{A}:ro" \\',
        f'  -v "$PWD/configs:{DIR}:ro" \\',
        f"  -e VLLM_TUNED_CONFIG_FOLDER={DIR} \\",
        "  --linear-backend triton",
    ]
    assert (
        f"# 1 fused-MoE file(s) (E=...): one read-only folder mount of $PWD/configs/ at {DIR}/,"
    ) in text.splitlines()


def test_compose_moe_only() -> None:
    text = render_mounts(request(fmt="compose", file_names=(MOE,), host_dir="/srv/cfg/"))
    assert body(text) == [
        "    volumes:",
        "      - type: bind",
        '        source: "/srv/cfg"',
        f'        target: "{DIR}"',
        "        read_only: true",
        "    environment:",
        f'      VLLM_TUNED_CONFIG_FOLDER: "{DIR}"',
    ]


def test_k8s_moe_configmap_folder_and_env() -> None:
    text = render_mounts(request(fmt="k8s", file_names=(MOE, A)))
    assert body(text) == [
        "volumes:",
        "  - name: blockfp8-configs",
        "    configMap:",
        "      name: blockfp8-nvidia-l20",
        "      items:",
        "        - key: n5120-k3072-b128x128.json",
        f'          path: "{A}"',
        "  - name: blockfp8-moe-configs",
        "    configMap:",
        "      name: blockfp8-nvidia-l20-moe",
        "      items:",
        "        - key: e128-n384-b128x128.json",
        f'          path: "{MOE}"',
        "volumeMounts:",
        "  - name: blockfp8-configs",
        f'    mountPath: "{VLLM}/{A}"',
        f'    subPath: "{A}"',
        "    readOnly: true",
        "  - name: blockfp8-moe-configs",
        f'    mountPath: "{DIR}"',
        "    readOnly: true",
        "env:",
        "  - name: VLLM_TUNED_CONFIG_FOLDER",
        f'    value: "{DIR}"',
    ]
    assert text.splitlines()[-2:] == ["#   - --linear-backend", "#   - triton"]
    assert f'#     --from-file=e128-n384-b128x128.json="$PWD/configs/{MOE}" \\' in text.splitlines()


SGL_SITE = "/sgl-workspace/sglang/python"
SGL_MOE = f"{SGL_SITE}/sglang/srt/layers/moe/moe_runner/triton_utils/configs/triton_3_8_0"
H200 = "E=128,N=384,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json"


def test_sglang_mounts_moe_files_in_its_folder_for_the_tritons_version() -> None:
    text = render_mounts(
        request(
            engine="sglang",
            file_names=(MOE, A),
            site_packages=SGL_SITE,
            triton_version="3.8.0",
            triton_from="the one the files were tuned with",
        )
    )
    gemm = f"{SGL_SITE}/sglang/kernels/ops/gemm/configs"
    spaced = A.replace("[128,128]", "[128, 128]")
    assert body(text) == [
        f'  -v "$PWD/configs/{MOE}:{SGL_MOE}/{MOE.replace("[128,128]", "[128, 128]")}:ro" \\',
        f'  -v "$PWD/configs/{A}:{gemm}/{spaced}:ro" \\',
    ]
    assert "VLLM_TUNED_CONFIG_FOLDER" not in text
    assert (
        f"# Fused-MoE files (E=...) from {SGL_MOE}/, written by `tuner export --engine "
        'sglang` (no "triton_version" key: SGLang cannot read one);'
    ) in text.splitlines()
    assert (
        "# SGLang's folder for Triton 3.8.0 (the one the files were tuned with; it must be "
        "the serving image's, else SGLang falls back to another Triton's folder or its "
        "default config)."
    ) in text.splitlines()


def test_sglang_moe_names_carry_the_devices_own_name_and_older_folder() -> None:
    # vLLM's MoE name folds every H200 into NVIDIA_H200; SGLang's keeps the device's name.
    text = render_mounts(
        request(
            engine="sglang",
            device_name="NVIDIA_H200_NVL",
            fmt="k8s",
            file_names=(H200,),
            site_packages=SGL_SITE,
            engine_version="0.5.10.post1",
            triton_version="3.4.0",
        )
    )
    old = f"{SGL_SITE}/sglang/srt/layers/moe/fused_moe_triton/configs/triton_3_4_0"
    name = "E=128,N=384,device_name=NVIDIA_H200_NVL,dtype=fp8_w8a8,block_shape=[128, 128].json"
    assert body(text) == [
        "volumes:",
        "  - name: blockfp8-configs",
        "    configMap:",
        "      name: blockfp8-nvidia-h200-nvl",
        "      items:",
        "        - key: e128-n384-b128x128.json",
        f'          path: "{name}"',
        "volumeMounts:",
        "  - name: blockfp8-configs",
        f'    mountPath: "{old}/{name}"',
        f'    subPath: "{name}"',
        "    readOnly: true",
    ]


def test_sglang_moe_files_need_a_triton_version() -> None:
    with pytest.raises(
        ValueError,
        match=r"sglang reads fused-MoE files from a folder per "
        r"Triton version \(sglang/srt/layers/moe/moe_runner/triton_utils/configs/"
        r"triton_<X_Y_Z>\): give the serving image's Triton \(--triton-version, "
        r"e.g. 3.8.0\)",
    ):
        render_mounts(request(engine="sglang", file_names=(MOE,), site_packages=SGL_SITE))
    with pytest.raises(ValueError, match=r"Triton version '3.8.0\+git1' is not like 3.8.0"):
        render_mounts(
            request(
                engine="sglang",
                file_names=(MOE,),
                site_packages=SGL_SITE,
                triton_version="3.8.0+git1",
            )
        )


def test_config_files_in_takes_moe_files_under_vllms_h200_name() -> None:
    h200_moe = MOE.replace("NVIDIA_L20", "NVIDIA_H200")
    names = [A, MOE, h200_moe, "README.md"]
    assert config_files_in(names, "NVIDIA_L20") == [MOE, A]
    assert config_files_in(names, "NVIDIA_H200_NVL") == [h200_moe]


def test_config_files_in_takes_sglangs_moe_files_under_the_device_key() -> None:
    folded, nvl = (MOE.replace("NVIDIA_L20", name) for name in ("NVIDIA_H200", "NVIDIA_H200_NVL"))
    names = [folded, nvl]
    assert config_files_in(names, "NVIDIA_H200_NVL", "sglang") == [nvl]
    assert config_files_in(names, "NVIDIA_H200_NVL", "vllm") == [folded]


def test_any_engine_file_name_respells_moe_names() -> None:
    from tuner.kernels.moe.naming import any_engine_file_name

    h200 = "E=128,N=384,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json"
    assert any_engine_file_name(h200, "vllm") == h200.replace("[128, 128]", "[128,128]")
    assert any_engine_file_name(MOE, "sglang") == MOE.replace("[128,128]", "[128, 128]")
    assert any_engine_file_name(A, "sglang").endswith("block_shape=[128, 128].json")
