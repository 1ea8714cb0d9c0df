"""Kernel sources: vLLM found without importing it, `--kernel` choices, the hash of the kernel
text a source times, and a stand-in vLLM's kernels running through the families' workloads."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.standin_vllm import build_standin, importable
from tuner.files.provenance import family_kernel_hash
from tuner.kernels.registry import get_family
from tuner.kernels.shape import Shape
from tuner.kernels.source import (
    function_source,
    kernel_label,
    resolve_kernel,
    source_hash,
    vllm_package_dir,
    vllm_version,
)

MOE_SHAPE = Shape(64, 128, (128, 128), (("E", 4), ("top_k", 2)))


@pytest.fixture
def standin(tmp_path, monkeypatch):
    """The stand-in vLLM on sys.path; its modules dropped from sys.modules afterwards."""
    with importable(build_standin(tmp_path / "site"), monkeypatch) as root:
        yield root


def test_without_vllm_auto_is_the_builtin_and_vllm_is_refused() -> None:
    assert vllm_package_dir() is None and vllm_version() is None
    assert resolve_kernel("auto") == "builtin"
    assert resolve_kernel("builtin") == "builtin"
    with pytest.raises(ValueError, match=r"^--kernel vllm: vLLM is not importable here"):
        resolve_kernel("vllm")
    with pytest.raises(ValueError, match=r"--kernel must be one of auto, vllm, builtin"):
        resolve_kernel("triton")
    builtin = get_family("dense").source("auto")
    assert (builtin.name, builtin.version, builtin.label) == ("builtin", "", "builtin")
    assert builtin.kernel_hash == family_kernel_hash("dense")
    assert kernel_label("builtin") == ""


def test_a_standin_vllm_is_found_by_path_and_version_without_import(standin) -> None:
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
        assert source.name == "vllm" and source.label == "vllm 0.33.0"
        assert source.module_path == standin / "vllm" / path
        # The hash is that of vLLM's kernel function's own text, not the builtin's.
        assert source.kernel_hash == source_hash(source.module_path, source.function)
        assert source.kernel_hash != family_kernel_hash(family)
        assert get_family(family).source("builtin").kernel_hash == family_kernel_hash(family)
    assert "vllm" not in sys.modules


def test_a_vllm_without_the_moe_kernel_is_one_clear_error(standin) -> None:
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


@pytest.mark.parametrize(
    ("family", "shape", "M"), [("dense", Shape(256, 256, (128, 128)), 5), ("moe", MOE_SHAPE, 3)]
)
def test_the_standin_kernels_run_through_vllms_launch_and_match_the_builtin(
    standin, family, shape, M
) -> None:
    """Under the interpreter (a child process: TRITON_INTERPRET must be set before Triton is
    imported) both sources' outputs are bitwise equal, and the MoE source went through vLLM's
    dispatcher with vLLM's arguments."""
    code = (
        "import torch\n"
        "from tuner.kernels.registry import get_family\n"
        "from tuner.kernels.shape import Shape\n"
        f"shape = {shape!r}\n"
        f"family = get_family({family!r})\n"
        "outs = []\n"
        "for choice in ('builtin', 'vllm'):\n"
        f"    w = family.source(choice).workload(shape, {M}, seed=3, device='cpu')\n"
        f"    config = family.default_config(shape, {M})\n"
        "    outs.append(w.launch(config, w.weights(), out=None, out_dtype=torch.bfloat16))\n"
        "print(bool(torch.equal(outs[0], outs[1])), outs[0].shape)\n"
        "import sys\n"
        "moe = sys.modules.get('vllm.model_executor.layers.fused_moe.fused_moe')\n"
        "print(getattr(moe, 'CALLS', None))\n"
    )
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(standin)}
    run = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stderr
    equal, calls = run.stdout.strip().splitlines()
    if family == "dense":
        assert equal == "True torch.Size([5, 256])"
        assert calls == "None"
    else:
        assert equal == "True torch.Size([3, 128])"
        # gate_up: C [3 * 2, 1, 2N], top_k 2, unweighted; down: [3 * 2, 1, K], top_k 1, weighted
        assert calls == "[((6, 1, 128), 2, False), ((6, 1, 128), 1, True)]"


def test_a_driverless_host_takes_the_builtin_for_auto_and_refuses_vllm(
    standin, monkeypatch
) -> None:
    """vLLM replaces triton with a placeholder where no GPU driver is active (the stand-in's
    switch, as vllm/triton_utils/importing.py decides): auto says why it takes the builtin,
    --kernel vllm is refused with the fix; CUDA_VISIBLE_DEVICES="" keeps the real Triton. A
    worker (`resolve_kernel`) only looks for the package."""
    from tests.standin_vllm import NO_DRIVER_VARIABLE
    from tuner.kernels.source import PLACEHOLDER_FIX, KernelResolution, choose_kernel

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert choose_kernel("auto") == KernelResolution("vllm")
    monkeypatch.setenv(NO_DRIVER_VARIABLE, "1")
    problem = (
        "vLLM 0.33.0 replaces triton with a placeholder here (vllm/triton_utils/"
        "importing.py finds no single active GPU driver), so its kernels cannot run"
    )
    assert choose_kernel("auto") == KernelResolution(
        "builtin",
        f"--kernel auto times the builtin kernels: {problem} (for --kernel vllm: "
        f"{PLACEHOLDER_FIX})",
    )
    with pytest.raises(ValueError) as refused:
        choose_kernel("vllm")
    assert str(refused.value) == f"--kernel vllm: {problem}: {PLACEHOLDER_FIX}"
    assert 'CUDA_VISIBLE_DEVICES=""' in PLACEHOLDER_FIX
    assert choose_kernel("builtin") == KernelResolution("builtin")
    assert resolve_kernel("vllm") == "vllm"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert choose_kernel("vllm") == KernelResolution("vllm")


def test_under_the_placeholder_vllms_kernels_crash_as_the_real_ones_do(standin) -> None:
    """The crash of finding 4, reproduced by the stand-in: every launch of vLLM's kernels
    fails with "'function' object is not subscriptable"."""
    from tests.standin_vllm import NO_DRIVER_VARIABLE

    code = (
        "import torch\n"
        "from tuner.kernels.registry import get_family\n"
        "from tuner.kernels.shape import Shape\n"
        "family = get_family('dense')\n"
        "shape = Shape(256, 128, (128, 128))\n"
        "w = family.source('vllm').workload(shape, 2, seed=1, device='cpu')\n"
        "try:\n"
        "    w.launch(family.default_config(shape, 2), w.weights(), out=None,\n"
        "             out_dtype=torch.bfloat16)\n"
        "except TypeError as exc:\n"
        "    print(exc)\n"
    )
    env = {
        **os.environ,
        "TRITON_INTERPRET": "1",
        "PYTHONPATH": str(standin),
        NO_DRIVER_VARIABLE: "1",
    }
    env.pop("CUDA_VISIBLE_DEVICES", None)
    run = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "'function' object is not subscriptable"


class _Launch:
    """A stand-in for a JITFunction: `kernel[grid](*args, **kwargs)` records the call."""

    def __init__(self) -> None:
        self.calls: list = []

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.calls.append((grid, args, kwargs))


def _dispatch(module, *, rows: int, top_k: int, config: dict, sorted_ids: bool):
    """One fp8 block launch through the stand-in's dispatch_fused_moe_kernel on meta tensors
    (E 4, N 256, K 384): its recorded (grid, args, kwargs)."""
    import torch

    meta, E, N, K = "meta", 4, 256, 384
    A = torch.empty(rows, K, dtype=torch.float8_e4m3fn, device=meta)
    B = torch.empty(E, N, K, dtype=torch.float8_e4m3fn, device=meta)
    C = torch.empty(rows, top_k, N, dtype=torch.bfloat16, device=meta)
    A_scale = torch.empty(rows, 3, device=meta)
    B_scale = torch.empty(E, 2, 3, device=meta)
    ids = torch.empty(4096, dtype=torch.int32, device=meta) if sorted_ids else None
    experts = torch.empty(64, dtype=torch.int32, device=meta)
    padded = torch.empty(1, dtype=torch.int32, device=meta)
    kernel = _Launch()
    module.fused_moe_kernel = kernel
    module.dispatch_fused_moe_kernel(
        A,
        B,
        C,
        A_scale,
        B_scale,
        None,
        None,
        ids,
        experts,
        padded,
        False,
        top_k,
        config,
        None,
        True,
        False,
        False,
        False,
        False,
        block_shape=[128, 128],
    )
    return kernel.calls[0]


def test_the_standin_launches_fused_moe_as_vllm_does(standin, monkeypatch) -> None:
    """vLLM 0.33.0's invoke_fused_moe_triton_kernel: EM cut for small batches, rows * top_k *
    BLOCK_SIZE_M without sorted_token_ids (naive assignment), SPLIT_K 1, BLOCK_SIZE_K at most
    the block, SWAP_AB on sm90 for BLOCK_SIZE_M < 64 and BLOCK_SIZE_N >= 64 only."""
    import importlib

    from tests.standin_vllm import CAPABILITY_VARIABLE, VLLM_MOE_PARAMETERS

    module = importlib.import_module("vllm.model_executor.layers.fused_moe.fused_moe")
    small = {
        "BLOCK_SIZE_M": 16,
        "BLOCK_SIZE_N": 64,
        "BLOCK_SIZE_K": 256,
        "GROUP_SIZE_M": 1,
        "num_warps": 4,
        "num_stages": 3,
    }
    monkeypatch.setenv(CAPABILITY_VARIABLE, "9.0")
    grid, args, kwargs = _dispatch(module, rows=3, top_k=2, config=small, sorted_ids=True)
    EM = args[12]
    assert EM == 3 * 2 * 16 and grid == (EM // 16 * (256 // 64),)  # cut from 4096
    assert (
        kwargs["SWAP_AB"],
        kwargs["naive_block_assignment"],
        kwargs["SPLIT_K"],
        kwargs["BLOCK_SIZE_K"],
        kwargs["HAS_BIAS"],
        kwargs["USE_TD"],
    ) == (True, False, 1, 128, False, False)
    names = [name for name, _, _ in VLLM_MOE_PARAMETERS]
    # Every parameter of vLLM's kernel is passed once (positional, then by name), plus the
    # launch options.
    assert len(args) == 30 and set(kwargs) == set(names[30:]) | {"num_warps", "num_stages"}
    _, args, kwargs = _dispatch(module, rows=3, top_k=2, config=small, sorted_ids=False)
    assert (args[12], kwargs["naive_block_assignment"], args[7]) == (3 * 2 * 16, True, None)
    monkeypatch.setenv(CAPABILITY_VARIABLE, "8.9")
    assert _dispatch(module, rows=3, top_k=2, config=small, sorted_ids=True)[2]["SWAP_AB"] is False
    monkeypatch.setenv(CAPABILITY_VARIABLE, "9.0")
    wide = dict(small, BLOCK_SIZE_M=64)
    _, args, kwargs = _dispatch(module, rows=100, top_k=2, config=wide, sorted_ids=True)
    assert (args[12], kwargs["SWAP_AB"]) == (4096, False)
