"""Kernel sources: vLLM found without importing it, `--kernel` choices and the hash of the kernel
text a source times (a stand-in vLLM's kernels swept through the families' workloads, each
trial checked against the float64 reference: tests/cli/test_vllm_source.py)."""

from __future__ import annotations

import sys

import pytest

from tests.standin_vllm import build_standin, importable
from tuner.files.provenance import family_kernel_hash
from tuner.kernels.registry import get_family
from tuner.kernels.source import (
    function_source,
    kernel_label,
    resolve_kernel,
    vllm_package_dir,
    vllm_version,
)


@pytest.fixture
def standin(tmp_path, monkeypatch):
    """The stand-in vLLM on sys.path; its modules dropped from sys.modules afterwards."""
    with importable(build_standin(tmp_path / "site"), monkeypatch) as root:
        yield root


def test_without_vllm_auto_is_the_builtin_and_vllm_is_refused() -> None:
    assert vllm_package_dir() is None and vllm_version() is None
    assert resolve_kernel("auto") == "builtin"
    with pytest.raises(ValueError, match=r"^--kernel vllm: vLLM is not importable here"):
        resolve_kernel("vllm")
    with pytest.raises(ValueError, match=r"--kernel must be one of auto, vllm, builtin"):
        resolve_kernel("triton")
    builtin = get_family("dense").source("auto")
    assert (builtin.name, builtin.version) == ("builtin", "")
    assert builtin.kernel_hash == family_kernel_hash("dense")
    assert kernel_label("builtin") == ""


def test_a_standin_vllm_is_found_by_path_and_version_without_import(standin) -> None:
    """The hash of what each source timed: tests/cli/test_vllm_source.py."""
    assert vllm_package_dir() == standin / "vllm"
    assert vllm_version() == "0.33.0"
    assert "vllm" not in sys.modules
    assert resolve_kernel("auto") == "vllm"
    assert kernel_label("vllm") == "vllm-0.33.0"
    for family, path in (
        ("dense", "model_executor/layers/quantization/utils/fp8_utils.py"),
        ("moe", "model_executor/layers/fused_moe/fused_moe.py"),
    ):
        source = get_family(family).source("auto")
        assert (source.name, source.version) == ("vllm", "0.33.0")
        assert source.module_path == standin / "vllm" / path
    assert "vllm" not in sys.modules
    # A vLLM without the MoE kernel is one clear error.
    (standin / "vllm" / "model_executor" / "layers" / "fused_moe" / "fused_moe.py").unlink()
    assert get_family("dense").source("vllm").name == "vllm"
    with pytest.raises(
        ValueError,
        match=r"^--kernel vllm for moe: the installed vLLM has no "
        r"vllm\.model_executor\.layers\.fused_moe\.fused_moe",
    ):
        get_family("moe").source("vllm")


def test_function_source_cuts_one_function_with_its_decorator() -> None:
    text = "import x\n\n@deco\ndef f(a):\n    return a\n\n\ndef g():\n    pass\n"
    assert function_source(text, "f") == "@deco\ndef f(a):\n    return a\n"
    with pytest.raises(LookupError, match="no top-level function h"):
        function_source(text, "h")


def test_a_driverless_host_takes_the_builtin_for_auto_and_refuses_vllm(
    standin, monkeypatch
) -> None:
    """vLLM replaces triton with a placeholder where no GPU driver is active (the stand-in's
    switch, as vllm/triton_utils/importing.py decides): auto says why it takes the builtin,
    --kernel vllm is refused with the fix; CUDA_VISIBLE_DEVICES="" keeps the real Triton. A
    worker (`resolve_kernel`) only looks for the package."""
    from tests.standin_vllm import NO_DRIVER_VARIABLE
    from tuner.kernels.source import PLACEHOLDER_FIX, choose_kernel

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert choose_kernel("auto") == ("vllm", "")
    monkeypatch.setenv(NO_DRIVER_VARIABLE, "1")
    problem = (
        "vLLM 0.33.0 replaces triton with a placeholder here (vllm/triton_utils/"
        "importing.py finds no single active GPU driver), so its kernels cannot run"
    )
    assert choose_kernel("auto") == (
        "builtin",
        f"--kernel auto times the builtin kernels: {problem} (for --kernel vllm: "
        f"{PLACEHOLDER_FIX})",
    )
    with pytest.raises(ValueError) as refused:
        choose_kernel("vllm")
    assert str(refused.value) == f"--kernel vllm: {problem}: {PLACEHOLDER_FIX}"
    assert 'CUDA_VISIBLE_DEVICES=""' in PLACEHOLDER_FIX
    assert choose_kernel("builtin") == ("builtin", "")
    assert resolve_kernel("vllm") == "vllm"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert choose_kernel("vllm") == ("vllm", "")
