"""Mount recipes: exact lines for docker, compose and Kubernetes, in each engine's spelling."""

from __future__ import annotations

import pytest

from tuner.files.mounts import MountRequest, config_files_in, render_mounts
from tuner.kernels.dense.naming import SGLANG_NOTE, engine_file_name

A = "N=5120,K=3072,device_name=NVIDIA_L20,dtype=fp8_w8a8,block_shape=[128,128].json"
B = "N=7168,K=5120,device_name=NVIDIA_L20,dtype=fp8_w8a8,block_shape=[128,128].json"
SITE = "/usr/local/lib/python3.12/dist-packages"
VLLM = f"{SITE}/vllm/model_executor/layers/quantization/utils/configs"
SGL = "/sgl-workspace/sglang/python/sglang/srt/layers/quantization/configs"


def request(**changes) -> MountRequest:
    fields = {"device_name": "NVIDIA_L20", "engine": "vllm", "file_names": (B, A),
              "host_dir": "$PWD/configs", "site_packages": SITE,
              "fmt": "docker"}
    return MountRequest(**{**fields, **changes})


def body(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.startswith("#")]


def test_docker_lines() -> None:
    text = render_mounts(request())
    assert body(text) == [
        f'  -v "$PWD/configs/{A}:{VLLM}/{A}:ro" \\',
        f'  -v "$PWD/configs/{B}:{VLLM}/{B}:ro" \\',
        "  --linear-backend triton",
    ]
    assert text.splitlines()[-2] == ("# After the image name, with the server's other arguments "
                                     "(vLLM reads the files only with it):")
    assert "# NVIDIA_L20 is sm89 (L20: compute capability 8.9, from the table of known GPUs)." in (
        text.splitlines())
    assert f"# The engine reads them only from {VLLM}/" in text
    assert "--linear-backend triton" in text


def test_docker_quotes_an_odd_host_dir() -> None:
    text = render_mounts(request(host_dir='/srv/my "cfg" $HOME', file_names=(A,)))
    assert body(text) == [f'  -v "/srv/my \\"cfg\\" \\$HOME/{A}:{VLLM}/{A}:ro" \\',
                          "  --linear-backend triton"]


def test_compose_sglang_spelling() -> None:
    text = render_mounts(request(engine="sglang", fmt="compose", file_names=(A,),
                                 site_packages="/sgl-workspace/sglang/python/", host_dir="./cfg"))
    spaced = engine_file_name(A, "sglang")
    assert spaced.endswith("block_shape=[128, 128].json")
    assert body(text) == [
        "    volumes:", "      - type: bind", f'        source: "./cfg/{A}"',
        f'        target: "{SGL}/{spaced}"', "        read_only: true",
    ]
    assert f"# {SGLANG_NOTE}" in text


def test_k8s() -> None:
    text = render_mounts(request(fmt="k8s", file_names=(A,)))
    assert body(text) == [
        "volumes:", "  - name: blockfp8-configs", "    configMap:",
        "      name: blockfp8-nvidia-l20", "      items:",
        "        - key: n5120-k3072-b128x128.json", f'          path: "{A}"',
        "volumeMounts:", "  - name: blockfp8-configs", f'    mountPath: "{VLLM}/{A}"',
        f'    subPath: "{A}"', "    readOnly: true",
        "args:", "  - --linear-backend", "  - triton",
    ]
    assert (f'#     --from-file=n5120-k3072-b128x128.json="$PWD/configs/{A}" \\'
            in text.splitlines())


@pytest.mark.parametrize(("changes", "message"), [
    ({"site_packages": "relative/path"}, "--site-packages must be an absolute path"),
    ({"site_packages": "/a/../b"}, "--site-packages must be an absolute path"),
    ({"site_packages": "/a/$(rm -rf)"}, "--site-packages must be an absolute path"),
    ({"fmt": "helm"}, "format 'helm' is not one of docker, compose, k8s"),
    ({"engine": "trtllm"}, "engine 'trtllm' is not one of vllm, sglang"),
    ({"file_names": ()}, "no config files for NVIDIA_L20 to mount"),
    ({"file_names": ("config.json",)}, "'config.json' is not a config file name"),
])
def test_bad_requests(changes: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("$", r"\$")):
        render_mounts(request(**changes))


def test_config_files_in() -> None:
    other = A.replace("NVIDIA_L20", "NVIDIA_H200")
    assert config_files_in([B, "README.txt", other, A], "NVIDIA_L20") == [A, B]
