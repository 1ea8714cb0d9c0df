"""Device names with any character vLLM keeps: file names, log lines and
ConfigMap names take them; names vLLM cannot produce (or that would break a path, a header or a
shell word) are refused."""

from __future__ import annotations

import hashlib

import pytest

from tests.tuner.inputs.logfixtures import BLOCK_WARNING
from tuner.core import vllm_device_name
from tuner.files.mounts import configmap_name
from tuner.inputs.logs import scan_lines
from tuner.kernels.dense.family import config_file_name, parse_config_file_name

INTEL = "Intel(R)_Data_Center_GPU_Max_1550"
SITE = "/usr/local/lib/python3.12/dist-packages"
VLLM = f"{SITE}/vllm/model_executor/layers/quantization/utils/configs"


def test_vllm_keeps_every_character_but_the_space() -> None:
    # vLLM 0.33.0: get_device_name().replace(" ", "_") (fp8_utils.get_w8a8_block_fp8_configs).
    assert vllm_device_name("Intel(R) Data Center GPU Max 1550") == INTEL
    assert vllm_device_name("Intel(R) Arc(TM) Pro B70 Graphics") == (
        "Intel(R)_Arc(TM)_Pro_B70_Graphics"
    )
    assert vllm_device_name("NVIDIA GeForce RTX 4090 D") == "NVIDIA_GeForce_RTX_4090_D"


@pytest.mark.parametrize(
    "device",
    [
        INTEL,
        "Intel(R)_Arc(TM)_Pro_B70_Graphics",
        "AMD_Instinct_MI300X",
        "NVIDIA_A100-SXM4-80GB",
        "Odd,name=[x]:y;z",
        "a.b",
        "x" * 128,
    ],
)
def test_file_names_round_trip(device: str) -> None:
    name = config_file_name(5120, 3072, device)
    assert name == f"N=5120,K=3072,device_name={device},dtype=fp8_w8a8,block_shape=[128,128].json"
    parsed = parse_config_file_name(name)
    assert (parsed.N, parsed.K, parsed.device_name, parsed.block_shape) == (
        5120,
        3072,
        device,
        (128, 128),
    )
    sglang = parse_config_file_name(name.replace("[128,128]", "[128, 128]"))
    assert sglang.device_name == device


@pytest.mark.parametrize(
    "device",
    [
        "",
        "has space",
        'quote"d',
        "sl/ash",
        "back\\slash",
        "dot..dot",
        "..",
        ".",
        "tab\tx",
        "caf\u00e9",
        "x" * 129,
    ],
)
def test_file_names_with_names_vllm_cannot_key_are_refused(device: str) -> None:
    # The rule itself: tests/tuner/kernels/test_device_name.py.
    with pytest.raises(ValueError, match="must be 1..128 printable ASCII characters"):
        config_file_name(5120, 3072, device)
    spelled = f"N=5120,K=3072,device_name={device},dtype=fp8_w8a8,block_shape=[128,128].json"
    with pytest.raises(ValueError, match="is not a config file name like"):
        parse_config_file_name(spelled)


def test_from_log_reads_warnings_of_any_device() -> None:
    names = [config_file_name(5120, 3072, INTEL), config_file_name(7168, 5120, "Odd,name=[x]")]
    log = [BLOCK_WARNING.format(path=f"{VLLM}/{name}") for name in names]
    scan = scan_lines(log)
    assert scan.device_names == [INTEL, "Odd,name=[x]"]
    assert [(m.device_name, m.N, m.K) for m in scan.missing] == [
        (INTEL, 5120, 3072),
        ("Odd,name=[x]", 7168, 5120),
    ]
    assert scan.missing[0].path == f"{VLLM}/{names[0]}"


def test_configmap_names_stay_dns_labels() -> None:
    # sha256("Intel(R)_Data_Center_GPU_Max_1550")[:8] keeps two odd names apart.
    digest = hashlib.sha256(INTEL.encode()).hexdigest()[:8]
    assert configmap_name(INTEL) == f"blockfp8-intel-r-data-center-gpu-max-1550-{digest}"
    assert configmap_name("NVIDIA_L20") == "blockfp8-nvidia-l20"
