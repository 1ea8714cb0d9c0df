"""`tuner doctor` without a GPU (--arch), with and without a stand-in vLLM: what vLLM runs,
whether the files are read, the Triton vLLM needs and the exit code."""

from __future__ import annotations

import os

import pytest

from tests.cli.common import invoke
from tests.standin_vllm import build_standin, importable
from tuner.compare.doctor import spec_minor
from tuner.files.provenance import installed_triton_minor
from tuner.inputs.backends import linear_backend_value

HERE = installed_triton_minor()
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


@pytest.fixture
def vllm(tmp_path, monkeypatch):
    """A stand-in vLLM requiring the installed Triton, importable here and in doctor's child
    processes; `vllm(capability="9.0", ...)` sets the answers it gives (STANDIN_VLLM_*)."""
    root = build_standin(tmp_path / "site", triton_pin=f"{HERE}.0")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))

    def answers(**standin):
        for key, value in standin.items():
            if value is None:
                monkeypatch.delenv(f"STANDIN_VLLM_{key.upper()}", raising=False)
            else:
                monkeypatch.setenv(f"STANDIN_VLLM_{key.upper()}", value)

    with importable(root, monkeypatch):
        yield answers


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
        "tuning here will not change what vLLM runs: vLLM on sm89 reads no tuned file with "
        "default settings; start it with --linear-backend triton (and pass --linear-backend "
        "triton here) if tuner compare shows Triton wins"
    ]
    code, lines, _ = doctor("--arch", "sm89", "--linear-backend", "Triton")  # vLLM lower-cases it
    assert code == 0
    assert lines[-1] == "tuning here changes what vLLM runs: its dense files"
    code, lines, _ = doctor("--arch", "sm90", "--device", "L20")  # --arch wins
    assert (code, lines[1]) == (0, "architecture: sm90, device_name: NVIDIA_L20")  # MoE files


def test_bad_input_no_architecture_versions_and_mismatch_lines() -> None:
    code, _, errors = doctor()
    assert code == 1 and errors[-1] == (
        "tuning here will not change what vLLM runs: no GPU visible, no --arch and no --device "
        "of a known GPU model: say which GPU vLLM serves on"
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
    found = [spec_minor(spec) for spec in ("~=3.8.0", "==2.9.0", ">=3.6,<3.10", "", "==3.8.*")]
    assert found == ["3.8", "2.9", "3.6", None, None]
    assert linear_backend_value("deep-gemm") == "deep_gemm"


def test_vllms_own_selection_answers_for_the_gpu_it_sees(vllm) -> None:
    vllm(capability="9.0")
    code, lines, _ = doctor("--arch", "sm90")
    assert code == 0
    # Asked with a model config, as a server asks, vLLM's DeepGEMM takes the layer on sm90;
    # the kernels it tried first are listed in its order, with its reasons.
    at = lines.index(
        "dense block-FP8 linear: vLLM runs DeepGEMM (DeepGemmFp8BlockScaledMMKernel) "
        "by default (vLLM's own selection code)"
    )
    assert lines[at + 1 :] == [
        "  passed over first: FlashInferFp8DeepGEMMDynamicBlockScaledKernel has no usable "
        "FlashInfer block-scale FP8 GEMM here",
        "  files read: no; --linear-backend triton makes vLLM run the Triton kernel that reads "
        "them (mount them at vllm/model_executor/layers/quantization/utils/configs/); measure "
        "first: tuner compare",
        "fused-MoE block-FP8: vLLM runs TRITON (TritonExperts) by default with 128x128 weights "
        "and ep_size 1 (vLLM's own selection code)",
        "  files read: yes, from $VLLM_TUNED_CONFIG_FOLDER or vLLM's fused_moe/configs/",
        "tuning here changes what vLLM runs: its moe files",
    ]
    # vLLM picks Triton for dense layers and Marlin for MoE: the dense files are read.
    vllm(capability="8.9", moe_backend="MARLIN", dense_kernel="TritonFp8BlockScaledMMKernel")
    code, lines, _ = doctor("--arch", "sm89")
    assert (
        "  files read: yes, by default (from vllm/model_executor/layers/quantization/utils/"
        "configs/ in the image)"
    ) in lines
    assert lines[-1] == "tuning here changes what vLLM runs: its dense files"
    # a failing selection, or another GPU than asked about: the table answers, and says why
    vllm(capability="9.0", dense_kernel="raise:no kernel for you", moe_backend="raise:oracle down")
    _, lines, _ = doctor("--arch", "sm90")
    assert (
        f"  vLLM's selection code failed (RuntimeError: no kernel for you): {TABLE} answers"
        in lines
    )
    assert f"  vLLM's selection code failed (RuntimeError: oracle down): {TABLE} answers" in lines
    vllm(capability="8.9", dense_kernel=None, moe_backend=None)
    _, lines, _ = doctor("--arch", "sm90")
    assert (
        "  vLLM's own selection code answers only for the GPU it sees (sm89), not sm90: "
        f"{TABLE} answers"
    ) in lines


def test_with_a_model_vllm_is_asked_per_weight_shape_with_its_model_type(
    vllm, tmp_path, monkeypatch
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
    vllm(capability="9.0")
    code, lines, _ = doctor("--arch", "sm90", "--model", "mine")
    assert code == 0
    at = lines.index(
        "dense block-FP8 linear: vLLM runs DeepGEMM (DeepGemmFp8BlockScaledMMKernel) "
        "by default (vLLM's own selection code)"
    )
    assert lines[at + 1] == "  other shapes: CutlassFp8BlockScaledMMKernel for N=200,K=256"
    # On Blackwell vLLM turns DeepGEMM off for some model types: CUTLASS, and doctor says why.
    vllm(capability="10.0")
    _, lines, _ = doctor("--arch", "sm100", "--model", "qwen")
    at = lines.index(
        "dense block-FP8 linear: vLLM runs CUTLASS (CutlassFp8BlockScaledMMKernel) "
        "by default (vLLM's own selection code)"
    )
    assert lines[at + 1].endswith(
        "; DeepGemmFp8BlockScaledMMKernel is turned off for model type qwen3_5_text here"
    )
    # Without a GPU the table answers, per shape of the model.
    vllm(capability=None)
    _, lines, _ = doctor("--arch", "sm90", "--model", "mine")
    assert (
        "  mine TP 1: DeepGEMM for 1 of 2 shapes (N=7168,K=18432); CUTLASS for 1 of 2 "
        f"shapes (N=200,K=256) ({TABLE})"
    ) in lines


def test_a_driverless_host_times_the_builtin_and_says_why(vllm) -> None:
    vllm(no_gpu_driver="1")
    _, lines, _ = doctor("--arch", "sm89")
    placeholder = (
        "vLLM 0.33.0 replaces triton with a placeholder here (vllm/triton_utils/importing.py "
        "finds no single active GPU driver), so its kernels cannot run"
    )
    assert (
        f"vLLM 0.33.0: requires triton =={HERE}.0; a sweep here times the "
        f"builtin kernels (--kernel auto): {placeholder}; for --kernel vllm, run where a GPU "
        "driver is active (inside the serving image, on its GPU), or, on the CPU interpreter "
        '(--device interpreter), with CUDA_VISIBLE_DEVICES="" set, under which vLLM keeps the '
        "real Triton"
    ) in lines


def test_a_triton_other_than_vllms_is_the_reason_to_exit_1(tmp_path, monkeypatch) -> None:
    with importable(build_standin(tmp_path / "site", triton_pin="2.9.0"), monkeypatch):
        code, _, errors = doctor("--arch", "sm90")
    assert code == 1 and [line for line in errors if line.startswith("tuning here")] == [
        f"tuning here will not change what vLLM runs: triton {HERE} is installed but vLLM "
        "0.33.0 runs with triton 2.9: tune inside the serving image"
    ]
