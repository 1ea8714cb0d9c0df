"""vLLM device names and how `--device` arguments match them."""

import pytest

from tuner.core import ResolvedDevice, vllm_device_name
from tuner.files.pull import wanted_files
from tuner.inputs.devices import (
    device_hint,
    device_key,
    engine_device_name,
    gpu_device_key,
    matches,
    require_stored,
    resolve,
    resolve_device,
    store_device,
)
from tuner.kernels.dense.family import config_file_name
from tuner.kernels.gpus import known_capability
from tuner.run.gpus import GpuInfo


@pytest.mark.parametrize(
    ("gpu_name", "device_name"),
    [
        ("NVIDIA L20", "NVIDIA_L20"),
        ("NVIDIA H100 80GB HBM3", "NVIDIA_H100_80GB_HBM3"),  # as in vLLM's shipped file names
        ("AMD Instinct MI300X", "AMD_Instinct_MI300X"),
        ("NVIDIA A100-SXM4-80GB", "NVIDIA_A100-SXM4-80GB"),
        ("NVIDIA  RTX 6000/Ada ", "NVIDIA_RTX_6000_Ada"),
    ],
)
def test_vllm_device_name(gpu_name, device_name):
    assert vllm_device_name(gpu_name) == device_name


def test_matches():
    assert matches("L20", "NVIDIA_L20")
    assert matches("nvidia_l20", "NVIDIA_L20")
    assert matches("NVIDIA L20", "NVIDIA_L20")
    assert not matches("L20", "NVIDIA_L20S")
    assert not matches("L20", "TRITON_INTERPRETER")
    assert matches("interpreter", "TRITON_INTERPRETER")


def test_resolve():
    known = ["NVIDIA_L20", "NVIDIA_L40S", "TRITON_INTERPRETER"]
    assert resolve("L40S", known) == ["NVIDIA_L40S"]
    assert resolve("H200", known) == []


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("H200", "NVIDIA_H200"),
        ("NVIDIA H200", "NVIDIA_H200"),
        ("nvidia_h200", "NVIDIA_H200"),
        ("l40s", "NVIDIA_L40S"),
        ("RTX 4090", "NVIDIA_RTX_4090"),
        ("NVIDIA GeForce RTX 4090 D", "NVIDIA_GeForce_RTX_4090_D"),
        ("A100-SXM4-80GB", "NVIDIA_A100-SXM4-80GB"),
        ("H100 80GB HBM3", "NVIDIA_H100_80GB_HBM3"),
        ("AMD_Instinct_MI300X", "AMD_Instinct_MI300X"),
        ("Intel(R) Data Center GPU Max 1550", "Intel(R)_Data_Center_GPU_Max_1550"),
    ],
)
def test_gpu_names_as_users_type_them(name: str, key: str) -> None:
    assert gpu_device_key(name) == key


@pytest.mark.parametrize("name", ["H2OO", "bad name!", "NVIDIA_H2OO", "", "x" * 200])
def test_names_no_gpu_has_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="is not a GPU model name such as L20, H200"):
        gpu_device_key(name)


H200S = [
    GpuInfo(0, "2", "NVIDIA H200", "NVIDIA_H200", "9.0"),
    GpuInfo(1, "3", "NVIDIA H200", "NVIDIA_H200", "9.0"),
    GpuInfo(2, "5", "NVIDIA L20", "NVIDIA_L20", "8.9"),
]


def _no_lookup() -> list:
    raise AssertionError("the GPUs were looked up")


def test_a_device_is_resolved_once_with_what_cuda_reports() -> None:
    assert resolve_device("h200", lambda: H200S) == (
        ResolvedDevice("NVIDIA_H200", "NVIDIA H200", "9.0", visible_ids=("2", "3")),
        None,
    )
    assert resolve_device("interpreter", _no_lookup) == (
        ResolvedDevice(
            "TRITON_INTERPRETER", "TRITON_INTERPRETER", interpreter=True, visible_ids=(None,)
        ),
        None,
    )
    # A sweep that workers on other hosts run: the key of the name typed, no GPU looked up.
    assert resolve_device("NVIDIA H100 80GB HBM3", _no_lookup, need_device=False) == (
        ResolvedDevice("NVIDIA_H100_80GB_HBM3"),
        None,
    )


def test_a_device_no_gpu_here_matches() -> None:
    with pytest.raises(ValueError) as error:
        resolve_device("L40S", lambda: H200S)
    assert str(error.value) == (
        "no visible GPU matches --device L40S; visible: NVIDIA_H200, NVIDIA_L20"
    )
    device, note = resolve_device("L40S", lambda: H200S, plan_only=True)
    assert device == ResolvedDevice("NVIDIA_L40S", visible_ids=(None,))
    assert note is not None and note.startswith(
        "note: no visible GPU matches --device L40S here (visible: NVIDIA_H200, NVIDIA_L20)"
    )
    with pytest.raises(ValueError, match=r"^--device 'H2OO' is not a GPU model name such as L20 "):
        resolve_device("H2OO", lambda: [], need_device=False)


def test_the_stores_device_named_by_a_device_argument() -> None:
    assert store_device("l20", ["NVIDIA_L20", "NVIDIA_L20S"]) == "NVIDIA_L20"
    with pytest.raises(
        ValueError,
        match="^no device in the store matches 'H100'; known: "
        "NVIDIA_L20; `tuner sweep --device H100` on that GPU",
    ):
        store_device("H100", ["NVIDIA_L20"])


def test_a_resolved_device_is_looked_up_in_the_store_as_it_is() -> None:
    known = ["NVIDIA_H100_80GB_HBM3", "NVIDIA_H100_PCIe"]
    # "H100" names both stored keys; the visible GPU's key picks the one checked
    assert require_stored("H100", "NVIDIA_H100_PCIe", known) == "NVIDIA_H100_PCIe"
    with pytest.raises(ValueError) as raised:
        require_stored("H100", "NVIDIA_H100_NVL", known)
    assert str(raised.value) == (
        "no device in the store matches 'H100' (NVIDIA_H100_NVL); known: "
        "NVIDIA_H100_80GB_HBM3, NVIDIA_H100_PCIe; `tuner sweep --device H100` on that GPU, or "
        "`tuner import` of its files, adds it"
    )
    assert require_stored("interpreter", "TRITON_INTERPRETER", ["TRITON_INTERPRETER"]) == (
        "TRITON_INTERPRETER"
    )


def test_one_key_for_the_cli_the_api_and_the_file_names() -> None:
    known = ["NVIDIA_L20", "NVIDIA_L20S", "nvidia_h100", "NVIDIA_H100"]
    assert device_key("l20", known) == "NVIDIA_L20"  # a device the store (or folder) has
    assert device_key("NVIDIA_L20S", known) == "NVIDIA_L20S"
    assert device_key("H200", known) == "NVIDIA_H200"  # else the GPU model's key
    assert device_key("cpu", known) == "TRITON_INTERPRETER"
    assert device_key("NVIDIA_H100", known) == "NVIDIA_H100"  # the exact name first
    with pytest.raises(ValueError, match="'H100' names 2 devices in the store"):
        device_key("H100", known)
    with pytest.raises(ValueError, match="is not a GPU model name"):
        device_key("H2OO", known)


def test_one_table_of_gpus_answers_the_hint_and_the_architecture() -> None:
    # A10 is sm86: planned as NVIDIA_A10 without a "did you mean 'A100'?", known to doctor.
    assert (device_hint("A10"), known_capability("NVIDIA_A10")) == ("", 86)
    assert device_hint("L2O") == " (did you mean 'L20'?)"


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
