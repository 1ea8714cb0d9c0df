"""Mount recipes with fused-MoE files: one read-only folder mount and VLLM_TUNED_CONFIG_FOLDER
(vLLM's get_moe_configs reads it first); dense files per file as before."""

from __future__ import annotations

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
    assert (f"# 1 fused-MoE file(s) (E=...): one read-only folder mount of $PWD/configs/ at "
            f"{DIR}/,") in text.splitlines()


def test_compose_moe_only() -> None:
    text = render_mounts(request(fmt="compose", file_names=(MOE,), host_dir="/srv/cfg/"))
    assert body(text) == [
        "    volumes:", "      - type: bind", '        source: "/srv/cfg"',
        f'        target: "{DIR}"', "        read_only: true",
        "    environment:", f'      VLLM_TUNED_CONFIG_FOLDER: "{DIR}"',
    ]


def test_k8s_moe_configmap_folder_and_env() -> None:
    text = render_mounts(request(fmt="k8s", file_names=(MOE, A)))
    assert body(text) == [
        "volumes:", "  - name: blockfp8-configs", "    configMap:",
        "      name: blockfp8-nvidia-l20", "      items:",
        "        - key: n5120-k3072-b128x128.json", f'          path: "{A}"',
        "  - name: blockfp8-moe-configs", "    configMap:",
        "      name: blockfp8-nvidia-l20-moe", "      items:",
        "        - key: e128-n384-b128x128.json", f'          path: "{MOE}"',
        "volumeMounts:",
        "  - name: blockfp8-configs", f'    mountPath: "{VLLM}/{A}"', f'    subPath: "{A}"',
        "    readOnly: true",
        "  - name: blockfp8-moe-configs", f'    mountPath: "{DIR}"', "    readOnly: true",
        "env:", "  - name: VLLM_TUNED_CONFIG_FOLDER", f'    value: "{DIR}"',
        "args:", "  - --linear-backend", "  - triton",
    ]
    assert (f'#     --from-file=e128-n384-b128x128.json="$PWD/configs/{MOE}" \\'
            in text.splitlines())


def test_sglang_leaves_moe_files_out() -> None:
    text = render_mounts(request(engine="sglang", file_names=(MOE, A),
                                 site_packages="/sgl-workspace/sglang/python"))
    assert len(body(text)) == 1 and "VLLM_TUNED_CONFIG_FOLDER" not in body(text)[0]
    assert ("# 1 fused-MoE file(s) (E=...) left out: SGLang does not read them from "
            "VLLM_TUNED_CONFIG_FOLDER; these mounts cover the dense files only.") in text


def test_config_files_in_takes_moe_files_under_vllms_h200_name() -> None:
    h200_moe = MOE.replace("NVIDIA_L20", "NVIDIA_H200")
    names = [A, MOE, h200_moe, "README.md"]
    assert config_files_in(names, "NVIDIA_L20") == [MOE, A]
    assert config_files_in(names, "NVIDIA_H200_NVL") == [h200_moe]


def test_any_engine_file_name_respells_moe_names() -> None:
    from tuner.kernels.moe.naming import any_engine_file_name

    h200 = "E=128,N=384,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json"
    assert any_engine_file_name(h200, "vllm") == h200.replace("[128, 128]", "[128,128]")
    assert any_engine_file_name(MOE, "sglang") == MOE.replace("[128,128]", "[128, 128]")
    assert any_engine_file_name(A, "sglang").endswith("block_shape=[128, 128].json")
