"""vLLM's default kernel (its own selection, else the table per architecture) and the verdict
on `--linear-backend triton` against it, from controlled timings."""

from __future__ import annotations

import importlib

import pytest
import torch

from tests.standin_vllm import (
    CAPABILITY_VARIABLE,
    FLASHINFER_VARIABLE,
    append,
    build_standin,
    importable,
)
from tuner.compare.versus import OK, UNAVAILABLE, BackendTime, ComparePoint
from tuner.compare.vllm_default import (
    BY_SELECTION,
    BY_TABLE,
    VllmDefault,
    beats,
    default_kernels,
    flag_lines,
    table_reasons,
    vllm_choice,
)

SHAPES = [(256, 384), (576, 256)]

# A selection at vLLM 0.33.0's path and with its signature (kernels/linear/__init__.py): the
# first kernel of the platform's list that is supported and can implement the config.
_SELECTION = """
from vllm.model_executor.kernels.linear.scaled_mm.humming import HummingFP8ScaledMMLinearKernel
from vllm.model_executor.kernels.linear.scaled_mm.marlin import MarlinFP8ScaledMMLinearKernel

CHOSEN = []
_POSSIBLE_FP8_BLOCK_KERNELS = {"cuda": [HummingFP8ScaledMMLinearKernel,
                                        MarlinFP8ScaledMMLinearKernel]}


def choose_scaled_mm_linear_kernel(config, possible_kernels, compute_capability=None,
                                   force_kernel=None, *, quantization):
    CHOSEN.append((config.weight_shape, config.weight_quant_key.scale.group_shape.row,
                   config.activation_quant_key.scale.group_shape.col, quantization))
    for kernel in possible_kernels["cuda"]:
        if kernel.is_supported()[0] and kernel.can_implement(config)[0]:
            return kernel
    raise ValueError("Failed to find a kernel")
"""


@pytest.fixture
def standin(tmp_path, monkeypatch):
    """The stand-in vLLM, with a selection, on sys.path, seeing an sm89 GPU; its modules
    dropped afterwards."""
    monkeypatch.setenv(CAPABILITY_VARIABLE, "8.9")
    root = build_standin(tmp_path / "site")
    append(root, "vllm.model_executor.kernels.linear.__init__", _SELECTION)
    with importable(root, monkeypatch):
        yield root


def test_vllms_selection_is_asked_with_a_block_fp8_layer(standin) -> None:
    assert vllm_choice(256, 384, "bfloat16") == "MarlinFP8ScaledMMLinearKernel"
    linear = importlib.import_module("vllm.model_executor.kernels.linear")
    assert linear.CHOSEN == [((256, 384), 128, 128, "fp8_block_w8a8")]
    marlin = VllmDefault(("vllm-marlin",), "MarlinFP8ScaledMMLinearKernel", BY_SELECTION)
    assert default_kernels(SHAPES, None, "bfloat16") == dict.fromkeys(SHAPES, marlin)


@pytest.fixture
def seen(tmp_path, monkeypatch):
    """The stand-in vLLM with its own 8-kernel selection on sys.path; returns a function that
    sets the compute capability it sees ("9.0"; None: no GPU)."""

    def see(capability: str | None) -> None:
        if capability is None:
            monkeypatch.delenv(CAPABILITY_VARIABLE, raising=False)
        else:
            monkeypatch.setenv(CAPABILITY_VARIABLE, capability)

    with importable(build_standin(tmp_path / "site"), monkeypatch):
        yield see


DEEPSEEK = (7168, 18432)  # shapes/deepseek-v3.toml, TP 1: N % 64 == 0, K % 128 == 0


def test_on_sm90_the_selection_names_deepgemm_as_a_server_does(seen, monkeypatch) -> None:
    """Finding 3: asked under a current config with the model's config, vLLM's DeepGEMM takes
    a DeepSeek-V3 layer on sm90; under a default VllmConfig() (no model config) it refuses,
    and CUTLASS was named instead."""
    from tuner.compare.vllm_linear import default_vllm_config
    from tuner.kernels.vllm_layers import block_fp8_layer_config

    seen("9.0")
    assert vllm_choice(*DEEPSEEK, "bfloat16", "deepseek_v3") == "DeepGemmFp8BlockScaledMMKernel"
    linear = importlib.import_module("vllm.model_executor.kernels.linear")
    with default_vllm_config():  # what doctor and compare asked under before
        chosen = linear.choose_scaled_mm_linear_kernel(
            block_fp8_layer_config(*DEEPSEEK, torch.bfloat16),
            linear._POSSIBLE_FP8_BLOCK_KERNELS,
            quantization="fp8_block_w8a8",
        )
    assert chosen.__name__ == "CutlassFp8BlockScaledMMKernel"
    # DeepGEMM's own limits: bf16 output, N % 64 == 0; CUTLASS takes the rest.
    assert vllm_choice(*DEEPSEEK, "float16", "deepseek_v3") == "CutlassFp8BlockScaledMMKernel"
    assert vllm_choice(200, 256, "bfloat16", "deepseek_v3") == "CutlassFp8BlockScaledMMKernel"
    # Where FlashInfer's block-scale GEMM is usable, FlashInfer DeepGEMM comes first on sm90.
    monkeypatch.setenv(FLASHINFER_VARIABLE, "1")
    assert vllm_choice(*DEEPSEEK, "bfloat16", "deepseek_v3") == (
        "FlashInferFp8DeepGEMMDynamicBlockScaledKernel"
    )
    assert default_kernels([DEEPSEEK], "9.0", "bfloat16", model_type="deepseek_v3") == {
        DEEPSEEK: VllmDefault((), "FlashInferFp8DeepGEMMDynamicBlockScaledKernel", BY_SELECTION)
    }


def test_the_model_type_turns_deepgemm_off_on_blackwell_only(seen) -> None:
    seen("10.0")
    assert vllm_choice(*DEEPSEEK, "bfloat16", "deepseek_v3") == "DeepGemmFp8BlockScaledMMKernel"
    assert vllm_choice(*DEEPSEEK, "bfloat16", "qwen3_5_text") == "CutlassFp8BlockScaledMMKernel"
    seen("9.0")
    assert vllm_choice(*DEEPSEEK, "bfloat16", "qwen3_5_text") == "DeepGemmFp8BlockScaledMMKernel"
    seen("8.9")
    assert vllm_choice(*DEEPSEEK, "bfloat16", "deepseek_v3") == "MarlinFP8ScaledMMLinearKernel"


def test_without_a_gpu_the_table_answers_and_says_why(seen) -> None:
    seen(None)  # VllmConfig() cannot infer a device type, as vLLM 0.33.0's cannot
    found = default_kernels([DEEPSEEK, (200, 256)], "9.0", "bfloat16", model_type="deepseek_v3")
    reason = (
        "vLLM's selection did not answer here (RuntimeError: Failed to infer device type "
        "(the stand-in sees no GPU))"
    )
    assert found == {
        DEEPSEEK: VllmDefault(
            ("vllm-deepgemm",), "DeepGemmFp8BlockScaledMMKernel", BY_TABLE, reason
        ),
        (200, 256): VllmDefault(
            ("vllm-cutlass",), "CutlassFp8BlockScaledMMKernel", BY_TABLE, reason
        ),
    }
    assert table_reasons(found) == [f"{reason}: the tuner's table of vLLM 0.33.0 answers"]


def _no_vllm(*args):
    raise ImportError("No module named 'vllm'")


def test_without_vllm_the_table_per_shape() -> None:
    why = "vLLM's selection did not answer here (ImportError: No module named 'vllm')"
    assert default_kernels(SHAPES[:1], "8.9", "bfloat16", choose=_no_vllm) == {
        SHAPES[0]: (VllmDefault(("vllm-marlin",), "MarlinFP8ScaledMMLinearKernel", BY_TABLE, why))
    }
    assert default_kernels(SHAPES[:1], "9.0", "float16", choose=_no_vllm) == {
        SHAPES[0]: (VllmDefault(("vllm-cutlass",), "CutlassFp8BlockScaledMMKernel", BY_TABLE, why))
    }
    assert default_kernels(SHAPES[:1], "", "bfloat16", choose=_no_vllm) == {
        SHAPES[0]: (VllmDefault((), None, BY_TABLE, why))
    }


def test_a_class_compare_does_not_time_maps_to_no_backend() -> None:
    picked = default_kernels(
        SHAPES,
        "9.0",
        "bfloat16",
        choose=lambda N, K, dtype, model_type: (
            "CutlassFp8BlockScaledMMKernel"
            if N == 256
            else "FlashInferFp8DeepGEMMDynamicBlockScaledKernel"
        ),
    )
    assert picked == {
        (256, 384): VllmDefault(("vllm-cutlass",), "CutlassFp8BlockScaledMMKernel", BY_SELECTION),
        (576, 256): VllmDefault((), "FlashInferFp8DeepGEMMDynamicBlockScaledKernel", BY_SELECTION),
    }


def _point(N: int, K: int, M: int, tuned: float | None, marlin: float | None) -> ComparePoint:
    def time(name, value):
        return (
            BackendTime(name, OK, value, value, value)
            if value is not None
            else BackendTime(name, UNAVAILABLE, note="no file")
        )

    return ComparePoint(N, K, M, (time("triton-tuned", tuned), time("vllm-marlin", marlin)))


MARLIN = VllmDefault(("vllm-marlin",), "MarlinFP8ScaledMMLinearKernel", BY_SELECTION)


def test_per_m_and_decode_and_prefill_from_controlled_timings() -> None:
    points = [
        _point(256, 384, 1, 10.0, 12.5),
        _point(576, 256, 1, 10.0, 20.0),  # 1.25x and 2x
        _point(256, 384, 512, 50.0, 50.0),
        _point(576, 256, 512, 40.0, None),
        _point(256, 384, 2048, 100.0, 80.0),
        _point(576, 256, 2048, 200.0, 160.0),
    ]
    assert flag_lines(points, dict.fromkeys(SHAPES, MARLIN)) == [
        "vLLM's default here: MarlinFP8ScaledMMLinearKernel (timed as vllm-marlin; from vLLM's "
        "own selection). --linear-backend triton with the tuned files vs it, per M (geometric "
        "mean over shapes):",
        # sqrt(1.25 * 2) = 1.5811
        "  M=1: Triton beats vllm-marlin by 58.1% (vllm-marlin takes 1.58x)",
        "  M=512: Triton and vllm-marlin tie",
        "  M=2048: vllm-marlin beats Triton by 25.0% (Triton takes 1.25x)",
        "--linear-backend triton, decode (M <= 32): Triton beats vllm-marlin by 58.1% "
        "(vllm-marlin takes 1.58x) over 2 point(s)",
        "--linear-backend triton, prefill (M >= 2048): vllm-marlin beats Triton by 25.0% "
        "(Triton takes 1.25x) over 2 point(s)",
    ]


def test_no_default_timed_keeps_the_old_line() -> None:
    points = [_point(256, 384, 1, 10.0, None)]
    none = {SHAPES[0]: VllmDefault((), None, BY_TABLE)}
    assert flag_lines(points, none) == [
        "vLLM's default kernel was not compared (no vLLM default kernel is timed on this "
        "backend); the verdicts above compare the kernels that ran"
    ]
    triton = {
        SHAPES[0]: VllmDefault(("triton-tuned",), "TritonFp8BlockScaledMMKernel", BY_SELECTION)
    }
    assert flag_lines(points, triton) == [
        "vLLM's default here is its Triton kernel (TritonFp8BlockScaledMMKernel): it reads the "
        "tuned files without --linear-backend triton"
    ]


def test_beats_words() -> None:
    assert beats(1.5, "vllm-cutlass") == (
        "Triton beats vllm-cutlass by 50.0% (vllm-cutlass takes 1.5x)"
    )
    assert beats(0.5, "vllm-cutlass") == "vllm-cutlass beats Triton by 100.0% (Triton takes 2x)"
