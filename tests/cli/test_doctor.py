"""`tuner doctor` without a GPU (--arch), with and without a stand-in vLLM: what vLLM runs,
whether the files are read, the Triton vLLM needs and the exit code."""

from __future__ import annotations

import importlib.metadata
import os

import pytest

from tests.cli.common import invoke
from tests.standin_vllm import NO_DRIVER_VARIABLE, build_standin, importable
from tuner.inputs.backends import linear_backend_value

HERE = importlib.metadata.version("triton")
TABLE = "the tuner's table of vLLM 0.33.0"


@pytest.fixture(autouse=True)
def no_gpu(monkeypatch):
    """doctor takes its default arch and device from the visible GPUs: none here, as on CI,
    whatever GPU the machine running the tests has."""
    monkeypatch.setattr("tuner.run.gpus.visible_gpus", lambda: [])
    for key in [k for k in os.environ if k.startswith("STANDIN_")]:
        monkeypatch.delenv(key)


def doctor(*args):
    result = invoke("doctor", *args)
    return result.exit_code, result.stdout.splitlines(), result.stderr.splitlines()


def test_without_vllm_the_table_answers_and_the_flag_decides_the_exit_code() -> None:
    # No GPU and no --arch: L20 is in the table of known GPUs, so sm89.
    code, lines, errors = doctor("--device", "L20")
    assert code == 1
    assert lines[:2] == ["GPUs: none visible", "architecture: sm89, device_name: NVIDIA_L20"]
    assert lines[3].startswith("vLLM: not importable here; a sweep here times the builtin")
    assert (
        f"dense block-FP8 linear: by default vLLM runs Marlin (weight-only FP8, W8A16) ({TABLE})"
        in lines
    )
    assert [line for line in errors if line.startswith("tuning here")] == [
        "tuning here will not change what vLLM runs: vLLM on sm89 reads no tuned file unless "
        "started with --linear-backend triton"
    ]
    code, lines, _ = doctor("--arch", "sm89", "--linear-backend", "Triton")  # vLLM lower-cases it
    assert code == 0
    assert lines[-1] == "tuning here changes what vLLM runs: its dense files"
    code, lines, _ = doctor("--arch", "sm90", "--device", "L20")  # --arch wins
    assert (code, lines[1]) == (0, "architecture: sm90, device_name: NVIDIA_L20")
    assert lines[-4:] == [
        "  files read: no; --linear-backend triton makes vLLM run the Triton kernel that reads "
        "them (mount them at vllm/model_executor/layers/quantization/utils/configs/); measure "
        "first: tuner compare",
        "fused-MoE block-FP8: vLLM runs Triton (fused_moe_kernel) by default with 128x128 "
        f"weights and ep_size 1 ({TABLE})",
        "  files read: yes, from $VLLM_TUNED_CONFIG_FOLDER or vLLM's fused_moe/configs/",
        "tuning here changes what vLLM runs: its moe files",
    ]


def test_bad_input_no_architecture_versions_and_mismatch_lines() -> None:
    code, _, errors = doctor()
    assert code == 1 and errors[-1] == (
        "tuning here will not change what vLLM runs: no GPU visible, no --arch and no --device "
        "of a known GPU model"
    )
    for args, error in [
        (["--arch", "hopper"], "error: --arch 'hopper' is not an architecture such as sm89 or"),
        (["--arch", "sm89", "--linear-backend", "trition"], "error: --linear-backend 'trition'"),
        (["--arch", "sm90", "--model", "nope"], "error: unknown model 'nope'"),
        (["--tp", "2"], "error: --tp needs --model"),
        (["--device", "H2OO"], "error: --device 'H2OO' is not a GPU model name"),
    ]:
        code, _, errors = doctor(*args)
        assert code == 2 and len(errors) == 1 and errors[0].startswith(error), errors
    assert linear_backend_value("deep-gemm") == "deep_gemm"


def test_with_a_model_the_table_answers_per_weight_shape_and_model_type(
    tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("TUNER_SHAPES_DIR", str(tmp_path))
    for name, model_type, shapes in [
        ("mine", "deepseek_v3", "[[7168, 18432], [200, 256]]"),
        ("qwen", "qwen3_5_text", "[[7168, 18432]]"),
    ]:
        (tmp_path / f"{name}.toml").write_text(
            f'model = "{name}"\nblock_shape = [128, 128]\nmodel_type = "{model_type}"\n\n'
            f'[tp.1]\nsource = "test"\nshapes = {shapes}\n'
        )
    _, lines, _ = doctor("--arch", "sm90", "--model", "mine")
    assert (
        "  mine TP 1: DeepGEMM for 1 of 2 shapes (N=7168,K=18432); CUTLASS for 1 of 2 "
        f"shapes (N=200,K=256) ({TABLE})"
    ) in lines
    # On Blackwell vLLM turns DeepGEMM off for some model types: CUTLASS.
    _, lines, _ = doctor("--arch", "sm100", "--model", "qwen")
    assert f"  qwen TP 1: CUTLASS for 1 of 1 shapes ({TABLE})" in lines


def test_beside_vllm_its_triton_and_a_driverless_host_are_said(tmp_path, monkeypatch) -> None:
    """A stand-in vLLM, importable here and in the child process that asks it about Triton."""
    root = build_standin(tmp_path / "site", triton_pin="2.9.0")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv(NO_DRIVER_VARIABLE, "1")
    with importable(root, monkeypatch):
        code, lines, errors = doctor("--arch", "sm89")
    placeholder = (
        "vLLM 0.33.0 replaces triton with a placeholder here (vllm/triton_utils/importing.py "
        "finds no single active GPU driver), so its kernels cannot run"
    )
    assert (
        f"vLLM 0.33.0: requires triton ==2.9.0; a sweep here times the builtin kernels "
        f"(--kernel auto): {placeholder}; for --kernel vllm, run where a GPU driver is active "
        "(inside the serving image, on its GPU), or, on the CPU interpreter (--device "
        'interpreter), with CUDA_VISIBLE_DEVICES="" set, under which vLLM keeps the real Triton'
    ) in lines
    assert code == 1 and [line for line in errors if line.startswith("tuning here")] == [
        f"tuning here will not change what vLLM runs: triton {HERE} is installed but vLLM "
        "0.33.0 requires triton ==2.9.0",
        "tuning here will not change what vLLM runs: vLLM on sm89 reads no tuned file unless "
        "started with --linear-backend triton",
    ]
