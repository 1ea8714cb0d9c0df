"""Mounts and pull recipes in every form: docker flags line by line; compose and Kubernetes
YAML parsed back, ConfigMap keys held to Kubernetes' key rule and the pods to its published
schema (kubernetes-validate, offline); each engine's release and family folders. The flag each
form ends with: tests/cli/test_deploy_advice.py."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import shutil
import subprocess

import kubernetes_validate
import pytest
import yaml

from tests.storefill import FAST
from tuner.files.engine_folders import DEFAULT_ENGINE_VERSIONS
from tuner.files.format import dump_config_file
from tuner.files.mounts import MountRequest, release_request, render_mounts
from tuner.files.pull import MARKER, replace_folder
from tuner.kernels.engines import SGLANG_NOTE, EngineFolder
from tuner.kernels.moe.family import moe_config_file_name
from tuner.kernels.registry import FAMILIES

A = "N=5120,K=3072,device_name=NVIDIA_L20,dtype=fp8_w8a8,block_shape=[128,128].json"
B = "N=7168,K=5120,device_name=NVIDIA_L20,dtype=fp8_w8a8,block_shape=[128,128].json"
MOE = "E=128,N=384,device_name=NVIDIA_L20,dtype=fp8_w8a8,block_shape=[128,128].json"
SITE = "/usr/local/lib/python3.12/dist-packages"
VLLM = f"{SITE}/vllm/model_executor/layers/quantization/utils/configs"
SGL_SITE = "/sgl-workspace/sglang/python"
SGL = f"{SGL_SITE}/sglang/kernels/ops/gemm/configs"  # SGLang 0.5.21 and later
SGL_MOE = f"{SGL_SITE}/sglang/srt/layers/moe/moe_runner/triton_utils/configs/triton_3_8_0"
DIR = "/opt/blockfp8-tuner/moe-configs"
ENV = "VLLM_TUNED_CONFIG_FOLDER"
SERVER = "http://tuner:8000"
CONFIGMAP_KEY = re.compile(r"[-._a-zA-Z0-9]+")  # Kubernetes' rule for a ConfigMap's keys


def key(name: str) -> str:
    return name.replace("=", "_").replace(",", "_").replace("[", "_").replace("]", "_")


def spaced(name: str) -> str:
    return name.replace("[128,128]", "[128, 128]")


def request(names=(B, A), **changes) -> MountRequest:
    files = {name: f'{{"1": "{name[:6]}"}}\n' for name in names}
    fields = {"device_name": "NVIDIA_L20", "engine": "vllm", "fmt": "docker", "files": files}
    return MountRequest(**{**fields, **changes})


def recipe(fmt: str, release: dict, engine: str = "vllm") -> str:
    return render_mounts(release_request(release, fmt, engine, SERVER))


def body(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.startswith("#")]


def pod(text: str) -> dict:
    """The printed pod and container parts put in a Pod, checked against Kubernetes' schema."""
    parts = [doc for doc in yaml.safe_load_all(text) if doc][-1]
    container = {"name": "vllm", "image": "vllm/vllm-openai:v0.33.0"}
    container |= {key: parts[key] for key in ("volumeMounts", "env") if key in parts}
    spec = {key: parts[key] for key in ("volumes", "initContainers") if key in parts}
    spec["containers"] = [container]
    manifest = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "vllm"}, "spec": spec}
    kubernetes_validate.validate(manifest, "1.32", strict=True)
    return manifest


def test_docker_lines_one_file_at_a_time_and_the_moe_folder() -> None:
    text = render_mounts(request(names=(B, MOE, A)))
    assert body(text) == [
        f'  -v "$PWD/configs/{A}:{VLLM}/{A}:ro" \\',
        f'  -v "$PWD/configs/{B}:{VLLM}/{B}:ro" \\',
        f'  -v "$PWD/configs:{DIR}:ro" \\',
        f"  -e {ENV}={DIR} \\",
        "  --linear-backend triton",
    ]
    lines = text.splitlines()
    assert lines[0] == (
        f"# vllm 0.33.0's site-packages in its usual image: {SITE}; in yours: python3 -c "
        '"import os, vllm; print(os.path.dirname(os.path.dirname(vllm.__file__)))"'
    )
    assert "# NVIDIA_L20 is sm89 (L20: compute capability 8.9, from the table of known GPUs)." in (
        lines
    )
    # MoE files alone are read whatever the linear backend: no flag.
    assert "  --linear-backend triton" not in render_mounts(request(names=(MOE,)))


def test_compose_is_a_compose_file_of_the_serving_service() -> None:
    text = render_mounts(request(fmt="compose", names=(MOE, A), host_dir="/srv/cfg/"))
    assert yaml.safe_load(text) == {
        "services": {
            "vllm": {
                "volumes": [
                    {
                        "type": "bind",
                        "source": f"/srv/cfg/{A}",
                        "target": f"{VLLM}/{A}",
                        "read_only": True,
                    },
                    {"type": "bind", "source": "/srv/cfg", "target": DIR, "read_only": True},
                ],
                "environment": {ENV: DIR},
            }
        }
    }


@pytest.mark.skipif(shutil.which("docker") is None, reason="no docker client")
def test_compose_config_accepts_it(tmp_path) -> None:
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode:
        pytest.skip("no docker compose plugin")
    (tmp_path / "base.yml").write_text("services:\n  vllm:\n    image: vllm/vllm-openai\n")
    (tmp_path / "mounts.yml").write_text(render_mounts(request(fmt="compose")))
    done = subprocess.run(
        ["docker", "compose", "-f", "base.yml", "-f", "mounts.yml", "config"],
        cwd=tmp_path,
        capture_output=True,
    )
    assert done.returncode == 0, done.stderr


def test_k8s_configmaps_with_valid_keys_and_the_engines_file_names() -> None:
    req = request(fmt="k8s", names=(MOE, A))
    text = render_mounts(req)
    configmaps = [doc for doc in yaml.safe_load_all(text) if doc and "kind" in doc]
    for configmap in configmaps:
        kubernetes_validate.validate(configmap, "1.32", strict=True)
        assert all(CONFIGMAP_KEY.fullmatch(key) for key in configmap["data"])
    assert [(c["metadata"]["name"], c["data"]) for c in configmaps] == [
        ("blockfp8-nvidia-l20", {key(A): req.files[A]}),
        ("blockfp8-nvidia-l20-moe", {key(MOE): req.files[MOE]}),
    ]
    spec = pod(text)["spec"]
    volumes = [
        ("blockfp8-configs", "blockfp8-nvidia-l20", key(A), A),
        ("blockfp8-moe-configs", "blockfp8-nvidia-l20-moe", key(MOE), MOE),
    ]
    assert spec["volumes"] == [
        {"name": volume, "configMap": {"name": name, "items": [{"key": key, "path": path}]}}
        for volume, name, key, path in volumes
    ]
    assert spec["containers"][0]["volumeMounts"] == [
        {"name": "blockfp8-configs", "mountPath": f"{VLLM}/{A}", "subPath": A, "readOnly": True},
        {"name": "blockfp8-moe-configs", "mountPath": DIR, "readOnly": True},
    ]
    assert spec["containers"][0]["env"] == [{"name": ENV, "value": DIR}]
    assert "kubectl create configmap" not in text  # it refuses paths holding '='


def test_sglang_files_in_its_folders_moe_in_the_folder_of_the_tuned_triton() -> None:
    text = render_mounts(request(engine="sglang", names=(MOE, A), triton="3.8.0"))
    assert body(text) == [
        f'  -v "$PWD/configs/{MOE}:{SGL_MOE}/{spaced(MOE)}:ro" \\',
        f'  -v "$PWD/configs/{A}:{SGL}/{spaced(A)}:ro" \\',
    ]
    assert ENV not in text
    assert f"# {SGLANG_NOTE}" in text.splitlines()
    # vLLM's MoE name folds every H200 into NVIDIA_H200; SGLang's keeps the device's own name.
    h200 = MOE.replace("NVIDIA_L20", "NVIDIA_H200")
    nvl = {"device_name": "NVIDIA_H200_NVL", "names": (h200,), "triton": "3.4.0"}
    text = render_mounts(request(engine="sglang", **nvl))
    folder = SGL_MOE.replace("3_8_0", "3_4_0")
    nvl = spaced(MOE.replace("NVIDIA_L20", "NVIDIA_H200_NVL"))
    assert body(text) == [f'  -v "$PWD/configs/{h200}:{folder}/{nvl}:ro" \\']


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"host_dir": "relative/path"}, "the host folder must be an absolute path"),
        ({"host_dir": '/srv/my "cfg"'}, "the host folder must be an absolute path"),
        ({"host_dir": "/srv/a:b"}, "the host folder must be an absolute path"),
        ({"fmt": "helm"}, "format 'helm' is not one of docker, compose, k8s, k8s-pull"),
        ({"engine": "trtllm"}, "engine 'trtllm' is not one of vllm, sglang"),
        ({"names": ()}, "no config files for NVIDIA_L20 to mount"),
        ({"names": ("config.json",)}, "'config.json' is not a config file name"),
        ({"engine": "sglang", "names": (MOE,)}, "were timed with several Tritons or none"),
        (
            {"engine": "sglang", "names": (MOE,), "triton": "3.8.0+git1"},
            "Triton version '3.8.0+git1' is not like 3.8.0",
        ),
    ],
)
def test_bad_requests(changes: dict, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        render_mounts(request(**changes))


H200 = A.replace("NVIDIA_L20", "NVIDIA_H200")
H200_MOE = MOE.replace("NVIDIA_L20", "NVIDIA_H200")
RELEASE = {
    "device_name": "NVIDIA_H200",
    "number": 3,
    "content_sha256": "ab" * 32,
    "files": [{"file_name": H200, "sha256": "1" * 64}, {"file_name": H200_MOE, "sha256": "2" * 64}],
}
PULL = ["tuner", "pull", "--server", SERVER, "--device", "NVIDIA_H200"]
PULL += ["--release", "3", "--engine", "vllm", "--out", "/configs"]


def test_k8s_pull_runs_tuner_pull_then_mounts_the_volume() -> None:
    text = recipe("k8s-pull", RELEASE)
    assert text.splitlines()[0] == (
        "# NVIDIA_H200 release 3 (2 file(s), content abababababab), pulled (every sha256 "
        "checked) before vllm starts and mounted read-only file by file."
    )
    spec = pod(text)["spec"]
    assert spec["volumes"] == [{"name": "blockfp8-configs", "emptyDir": {}}]
    (init,) = spec["initContainers"]
    assert init == {"name": "blockfp8-pull", "image": "blockfp8-tuner", "command": PULL} | {
        "volumeMounts": [{"name": "blockfp8-configs", "mountPath": "/configs"}]
    }
    serving = spec["containers"][0]
    assert serving["volumeMounts"] == [
        {
            "name": "blockfp8-configs",
            "mountPath": f"{VLLM}/{H200}",
            "subPath": H200,
            "readOnly": True,
        },
        {"name": "blockfp8-configs", "mountPath": DIR, "readOnly": True},
    ]
    assert serving["env"] == [{"name": ENV, "value": DIR}]


def test_compose_pull_for_sglang_in_its_folders() -> None:
    release = {**RELEASE, "summary": {"versions": {"triton": ["3.8.0"]}}}
    text = recipe("compose-pull", release, "sglang")
    # The serving service's depends_on, for vLLM: tests/cli/test_pull.py.
    compose = yaml.safe_load(text)
    assert compose["volumes"] == {"blockfp8-configs": {}}
    assert compose["services"]["blockfp8-pull"]["command"][-3:] == ["sglang", "--out", "/configs"]
    serving = compose["services"]["sglang"]
    assert [(v["target"], v["volume"]["subpath"]) for v in serving["volumes"]] == [
        (f"{SGL_MOE}/{spaced(H200_MOE)}", spaced(H200_MOE)),  # the release's Triton
        (f"{SGL}/{spaced(H200)}", spaced(H200)),
    ]


PULLED_MOE = moe_config_file_name(128, 768, "NVIDIA_H200")
SGL_PULLED = PULLED_MOE.replace("[128,128]", "[128, 128]")


def test_sglang_pull_writes_moe_files_without_the_triton_version_key(tmp_path):
    entry = {**FAST, "BLOCK_SIZE_N": 128}
    released = dump_config_file({1: entry, 64: entry}, triton_version="3.8.0").encode()
    pulled = {"file_name": PULLED_MOE, "sha256": hashlib.sha256(released).hexdigest()}
    release = {**RELEASE, "files": [pulled]}
    written, removed = replace_folder(tmp_path, release, "sglang", {PULLED_MOE: released})
    assert (written, removed) == ([SGL_PULLED], [])
    expected = dump_config_file({1: entry, 64: entry}).encode()
    assert (tmp_path / SGL_PULLED).read_bytes() == expected  # SGLang int()s every key it reads
    assert json.loads((tmp_path / MARKER).read_text())["files"] == [SGL_PULLED]
    vllm_dir = tmp_path / "vllm"
    replace_folder(vllm_dir, release, "vllm", {PULLED_MOE: released})
    assert (vllm_dir / PULLED_MOE).read_bytes() == released  # vLLM's get_moe_configs drops the key


def test_a_new_release_whose_folder_moved_is_one_row(monkeypatch) -> None:
    # docs/contributing.md, "A new vLLM or SGLang release": a family's row and the default.
    moved = "vllm/kernels/fp8/configs"
    dense = FAMILIES["dense"]
    rows = (*dense.files.engine_folders, EngineFolder("vllm", "0.34.0", moved))
    files = dataclasses.replace(dense.files, engine_folders=rows)
    monkeypatch.setitem(FAMILIES, "dense", dataclasses.replace(dense, files=files))
    assert body(render_mounts(request(names=(A,))))[0].endswith(f':{VLLM}/{A}:ro" \\')
    monkeypatch.setitem(DEFAULT_ENGINE_VERSIONS, "vllm", "0.34.0")
    assert body(render_mounts(request(names=(A,))))[0] == (
        f'  -v "$PWD/configs/{A}:{SITE}/{moved}/{A}:ro" \\'
    )
    mounts = pod(recipe("k8s-pull", RELEASE))["spec"]["containers"][0]["volumeMounts"]
    assert mounts[0]["mountPath"] == f"{SITE}/{moved}/{H200}"
    assert mounts[1]["mountPath"] == DIR  # fused-MoE's row did not move
