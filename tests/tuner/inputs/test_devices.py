"""A `--device` argument resolved once into vLLM's device key, which file names, log lines and
ConfigMap names take; the engines' device-name rules."""

import hashlib

import pytest

from tests.tuner.inputs.logfixtures import BLOCK_WARNING
from tuner.core import ResolvedDevice
from tuner.files.mounts import configmap_name
from tuner.files.pull import wanted_files
from tuner.inputs.devices import (
    device_among,
    engine_device_name,
    gpu_device_key,
    matches,
    resolve_device,
)
from tuner.inputs.logs import scan_lines
from tuner.kernels.dense.family import DENSE, config_file_name
from tuner.kernels.shape import Shape
from tuner.run.gpus import GpuInfo

INTEL = "Intel(R)_Data_Center_GPU_Max_1550"
H200S = [
    GpuInfo(0, "2", "NVIDIA H200", "NVIDIA_H200", "9.0"),
    GpuInfo(1, "3", "NVIDIA H200", "NVIDIA_H200", "9.0"),
    GpuInfo(2, "5", "NVIDIA L20", "NVIDIA_L20", "8.9"),
]


def _no_lookup() -> list:
    raise AssertionError("the GPUs were looked up")


def test_matches():
    assert matches("L20", "NVIDIA_L20") and matches("nvidia_l20", "NVIDIA_L20")
    assert matches("NVIDIA L20", "NVIDIA_L20") and matches("interpreter", "TRITON_INTERPRETER")
    assert not matches("L20", "NVIDIA_L20S") and not matches("L20", "TRITON_INTERPRETER")


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("H200", "NVIDIA_H200"),
        ("nvidia_h200", "NVIDIA_H200"),
        ("l40s", "NVIDIA_L40S"),
        ("RTX 4090", "NVIDIA_RTX_4090"),
        ("NVIDIA GeForce RTX 4090 D", "NVIDIA_GeForce_RTX_4090_D"),
        ("A100-SXM4-80GB", "NVIDIA_A100-SXM4-80GB"),
        ("H100 80GB HBM3", "NVIDIA_H100_80GB_HBM3"),
        ("AMD_Instinct_MI300X", "AMD_Instinct_MI300X"),
        ("Intel(R) Data Center GPU Max 1550", INTEL),
        ("H2OO", None),
        ("bad name!", None),
        ("NVIDIA_H2OO", None),
        ("", None),
    ],
)
def test_gpu_names_as_users_type_them(name: str, key: str | None) -> None:
    if key is not None:
        assert gpu_device_key(name) == key
        return
    with pytest.raises(ValueError, match="is not a GPU model name such as L20, H200"):
        gpu_device_key(name)


def test_a_device_is_resolved_once_with_what_cuda_reports() -> None:
    assert resolve_device("h200", lambda: H200S) == (
        ResolvedDevice("NVIDIA_H200", "NVIDIA H200", "9.0", visible_ids=("2", "3")),
        None,
    )
    # The interpreter, and a sweep that workers on other hosts run, look no GPU up.
    assert resolve_device("interpreter", _no_lookup)[0].visible_ids == (None,)
    typed = resolve_device("NVIDIA H100 80GB HBM3", _no_lookup, need_device=False)
    assert typed == (ResolvedDevice("NVIDIA_H100_80GB_HBM3"), None)
    # A name that is no GPU's, no visible GPU of the name: tests/cli (test_cli_mistakes,
    # test_sweep_plan).


def test_one_key_for_the_cli_the_api_the_store_and_the_file_names() -> None:
    known = ["NVIDIA_L20", "NVIDIA_L20S", "nvidia_h100", "NVIDIA_H100"]
    assert device_among("l20", known) == "NVIDIA_L20"  # a device the store (or folder) has
    assert device_among("NVIDIA_H100", known) == "NVIDIA_H100"  # the exact name first
    assert device_among("H200", known, new=True) == "NVIDIA_H200"  # else the GPU model's key
    assert device_among("cpu", known, new=True) == "TRITON_INTERPRETER"
    with pytest.raises(ValueError, match="'H100' names 2 devices in the store"):
        device_among("H100", known)
    # No device of the name in the store: tests/cli/test_cli_mistakes.py.


# The whole set of keys, at the 128-character edge: tests/tuner/core/test_facts.py.
@pytest.mark.parametrize("device", [INTEL, "Odd,name=[x]:y;z", "sl/ash", "caf\u00e9"])
def test_file_names_take_every_key_vllm_makes_and_refuse_the_rest(device: str) -> None:
    spelled = f"N=5120,K=3072,device_name={device},dtype=fp8_w8a8,block_shape=[128,128].json"
    if device in ("sl/ash", "caf\u00e9"):
        with pytest.raises(ValueError, match="must be 1..128 printable ASCII characters"):
            config_file_name(5120, 3072, device)
        with pytest.raises(ValueError, match="is not a config file name like"):
            DENSE.files.parse_file_name(spelled)
        return
    assert config_file_name(5120, 3072, device) == spelled
    parsed = DENSE.files.parse_file_name(spelled.replace("[128,128]", "[128, 128]"))  # SGLang's
    assert parsed == (Shape(5120, 3072, (128, 128)), device, "fp8_w8a8")
    assert DENSE.files.file_name(parsed[0], device, "vllm") == spelled
    log = [BLOCK_WARNING.format(path=f"/site/vllm/configs/{spelled}")]
    assert [(m.device_name, m.shape.N, m.shape.K) for m in scan_lines(log).files["dense"]] == [
        (device, 5120, 3072)
    ]


def test_configmap_names_stay_dns_labels() -> None:
    digest = hashlib.sha256(INTEL.encode()).hexdigest()[:8]
    assert configmap_name(INTEL) == f"blockfp8-intel-r-data-center-gpu-max-1550-{digest}"


def test_sglang_names_files_by_its_own_device_rule() -> None:
    # vLLM: re.sub(r"[\s/]+", "_", name); SGLang 0.5.23: name.replace(" ", "_").
    gpus = ["NVIDIA L20", "NVIDIA  RTX  6000"]
    assert engine_device_name("vllm", "NVIDIA_RTX_6000", gpus) == "NVIDIA_RTX_6000"
    assert engine_device_name("sglang", "NVIDIA_RTX_6000", gpus) == "NVIDIA__RTX__6000"
    assert engine_device_name("sglang", "NVIDIA_L20", gpus) == "NVIDIA_L20"
    # a '/' would name a subfolder: the key stays
    assert engine_device_name("sglang", "NVIDIA_A_B", ["NVIDIA A/B"]) == "NVIDIA_A_B"
    release = {
        "device_name": "NVIDIA_RTX_6000",
        "summary": {"tuned_with": [{"gpu_name": "NVIDIA  RTX  6000"}]},
        "files": [{"file_name": config_file_name(576, 7168, "NVIDIA_RTX_6000"), "sha256": "0"}],
    }
    (wanted,) = wanted_files(release, "sglang")
    assert wanted.save_as == (
        "N=576,K=7168,device_name=NVIDIA__RTX__6000,dtype=fp8_w8a8,block_shape=[128, 128].json"
    )
