"""Mount recipes: exact lines for docker, compose and Kubernetes, in each engine's spelling."""

from __future__ import annotations

import pytest
import yaml

from tuner.files.mounts import MountRequest, config_files_in, render_mounts
from tuner.kernels.dense.naming import engine_file_name
from tuner.kernels.engines import SGLANG_NOTE

A = "N=5120,K=3072,device_name=NVIDIA_L20,dtype=fp8_w8a8,block_shape=[128,128].json"
B = "N=7168,K=5120,device_name=NVIDIA_L20,dtype=fp8_w8a8,block_shape=[128,128].json"
SITE = "/usr/local/lib/python3.12/dist-packages"
VLLM = f"{SITE}/vllm/model_executor/layers/quantization/utils/configs"
SGL_SITE = "/sgl-workspace/sglang/python"
SGL = f"{SGL_SITE}/sglang/kernels/ops/gemm/configs"  # SGLang 0.5.21 and later


def request(**changes) -> MountRequest:
    fields = {
        "device_name": "NVIDIA_L20",
        "engine": "vllm",
        "file_names": (B, A),
        "host_dir": "$PWD/configs",
        "site_packages": SITE,
        "fmt": "docker",
    }
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
    assert text.splitlines()[-2] == (
        "# After the image name, with the server's other arguments "
        "(vLLM reads the files only with it):"
    )
    assert "# NVIDIA_L20 is sm89 (L20: compute capability 8.9, from the table of known GPUs)." in (
        text.splitlines()
    )
    assert text.splitlines()[:5] == [
        "# 2 read-only mount(s) of W8A8 block-FP8 configs for NVIDIA_L20 (vllm 0.33.0).",
        f"# vllm 0.33.0 reads dense files only from {VLLM}/",
        '# (site-packages in your image: python3 -c "import os, vllm; print(os.path.dirname('
        'os.path.dirname(vllm.__file__)))";',
        '# another release reads elsewhere: --engine-version, from python3 -c "import vllm; '
        'print(vllm.__version__)")',
        "# Files are read once per process: restart the server after changing them.",
    ]
    assert "--linear-backend triton" in text


def test_docker_quotes_an_odd_host_dir() -> None:
    text = render_mounts(request(host_dir='/srv/my "cfg" $HOME', file_names=(A,)))
    assert body(text) == [
        f'  -v "/srv/my \\"cfg\\" \\$HOME/{A}:{VLLM}/{A}:ro" \\',
        "  --linear-backend triton",
    ]


def test_compose_sglang_spelling() -> None:
    text = render_mounts(
        request(
            engine="sglang",
            fmt="compose",
            file_names=(A,),
            site_packages="/sgl-workspace/sglang/python/",
            host_dir="./cfg",
        )
    )
    spaced = engine_file_name(A, "sglang")
    assert spaced.endswith("block_shape=[128, 128].json")
    assert body(text) == [
        "    volumes:",
        "      - type: bind",
        f'        source: "./cfg/{A}"',
        f'        target: "{SGL}/{spaced}"',
        "        read_only: true",
    ]
    assert f"# {SGLANG_NOTE}" in text
    assert f"# sglang 0.5.23 reads dense files only from {SGL}/" in text.splitlines()


@pytest.mark.parametrize(
    ("version", "folder"),
    [
        ("0.5.23", "sglang/kernels/ops/gemm/configs"),
        ("0.5.21", "sglang/kernels/ops/gemm/configs"),
        ("0.5.20", "sglang/kernels/ops/quantization/configs"),
        ("0.5.16", "sglang/kernels/ops/quantization/configs"),
        ("0.5.15.post1", "sglang/srt/layers/quantization/configs"),
        ("0.5.5", "sglang/srt/layers/quantization/configs"),
        ("v0.6.0rc1", "sglang/kernels/ops/gemm/configs"),
    ],
)
def test_sglang_dense_folder_follows_the_engine_version(version: str, folder: str) -> None:
    text = render_mounts(
        request(engine="sglang", file_names=(A,), site_packages=SGL_SITE, engine_version=version)
    )
    spaced = engine_file_name(A, "sglang")
    assert body(text) == [f'  -v "$PWD/configs/{A}:{SGL_SITE}/{folder}/{spaced}:ro" \\']
    assert f"# sglang {version} reads dense files only from {SGL_SITE}/{folder}/" in text


K8S_FLAG = [
    "# vLLM reads the files only with --linear-backend triton: add these two items to the end of "
    "the",
    "# serving container's existing args: list, after --model and your other arguments:",
    "#   - --linear-backend",
    "#   - triton",
]


def test_k8s() -> None:
    text = render_mounts(request(fmt="k8s", file_names=(A,)))
    assert body(text) == [
        "volumes:",
        "  - name: blockfp8-configs",
        "    configMap:",
        "      name: blockfp8-nvidia-l20",
        "      items:",
        "        - key: n5120-k3072-b128x128.json",
        f'          path: "{A}"',
        "volumeMounts:",
        "  - name: blockfp8-configs",
        f'    mountPath: "{VLLM}/{A}"',
        f'    subPath: "{A}"',
        "    readOnly: true",
    ]
    # Two items to add to the container's own args, never an `args:` that replaces them.
    assert text.splitlines()[-4:] == K8S_FLAG
    assert yaml.safe_load(text)["volumeMounts"][0]["subPath"] == A
    assert f'#     --from-file=n5120-k3072-b128x128.json="$PWD/configs/{A}" \\' in text.splitlines()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"site_packages": "relative/path"}, "--site-packages must be an absolute path"),
        ({"site_packages": "/a/../b"}, "--site-packages must be an absolute path"),
        ({"site_packages": "/a/$(rm -rf)"}, "--site-packages must be an absolute path"),
        ({"fmt": "helm"}, "format 'helm' is not one of docker, compose, k8s"),
        ({"engine": "trtllm"}, "engine 'trtllm' is not one of vllm, sglang"),
        ({"file_names": ()}, "no config files for NVIDIA_L20 to mount"),
        ({"file_names": ("config.json",)}, "'config.json' is not a config file name"),
        (
            {"engine_version": "latest"},
            "engine version 'latest' is not a release number like 0.5.23",
        ),
    ],
)
def test_bad_requests(changes: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("$", r"\$")):
        render_mounts(request(**changes))


def test_config_files_in() -> None:
    other = A.replace("NVIDIA_L20", "NVIDIA_H200")
    assert config_files_in([B, "README.txt", other, A], "NVIDIA_L20") == [A, B]
