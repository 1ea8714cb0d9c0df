"""A stand-in vLLM for tests: a package in a temporary folder with vLLM 0.33.0's module paths and
distribution metadata, whose Triton kernels are new @triton.jit functions that call the
project's own kernels (dense) or are their text renamed (fused MoE), so their source text, and
hash, is their own, and whose launchers take vLLM's arguments. No vLLM code: only its module
paths, names and call signatures (facts from vLLM 0.33.0's fp8_utils.py and fused_moe.py)."""

from __future__ import annotations

import contextlib
import importlib
import inspect
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

from tests.standin_vllm_parts import (  # noqa: F401 - append: for tests
    add_linear_kernels,
    add_selection,
    append,
    module_path,
)
from tuner.kernels.dense.family import VLLM_DENSE
from tuner.kernels.moe.family import VLLM_MOE

VERSION = "0.33.0"


def _delegate(name: str, ours: str, module: str) -> str:
    """A @triton.jit `name` with the parameters of our kernel `module.ours` that calls it."""
    import importlib

    fn = getattr(importlib.import_module(module), ours).fn
    params = list(inspect.signature(fn).parameters.values())
    constexpr = [p.name for p in params if "constexpr" in str(p.annotation)]
    header = ",\n    ".join(f"{p.name}: tl.constexpr" if p.name in constexpr else p.name
                           for p in params)
    call = ", ".join(p.name for p in params)
    return (f"@triton.jit\ndef {name}(\n    {header},\n):\n    _{ours}({call})\n")


def _renamed_copy(name: str, ours: str, module: str) -> str:
    """Our kernel `module.ours`'s own text under the name `name`: a Triton kernel whose compiled
    code is ours (a delegating wrapper's is not quite: the fused-MoE one's PTX differs in two
    comparison opcodes) and whose source text, and hash, is its own."""
    import importlib

    fn = getattr(importlib.import_module(module), ours).fn
    text = textwrap.dedent(inspect.getsource(fn))
    return text.replace(f"def {ours}(", f"def {name}(", 1)


def build_standin(root: Path, version: str = VERSION, *, triton_pin: str = "3.8.0") -> Path:
    """Write the stand-in under `root` (put `root` on PYTHONPATH to import it).

    Args:
        root: an empty folder.
        version: the version its metadata and `__version__` give.
        triton_pin: the Triton its metadata says torch needs (as a `Requires-Dist`).

    Returns:
        root.
    """
    root.mkdir(parents=True, exist_ok=True)
    info = root / f"vllm-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n"
        f"Requires-Dist: torch==2.14.0\nRequires-Dist: triton=={triton_pin}\n")
    (info / "RECORD").write_text("")
    dense = module_path(root, VLLM_DENSE.module)
    dense.write_text(
        '"""Stand-in of vLLM\'s fp8_utils: its dense kernel calls the project\'s own."""\n'
        "import triton\nimport triton.language as tl\n\n"
        "from tuner.kernels.dense.kernel import w8a8_block_fp8_matmul_kernel as "
        "_w8a8_block_fp8_matmul_kernel\n\n\n"
        + _delegate(VLLM_DENSE.function, "w8a8_block_fp8_matmul_kernel",
                    "tuner.kernels.dense.kernel"))
    moe = module_path(root, VLLM_MOE.module)
    moe.write_text(
        '"""Stand-in of vLLM\'s fused_moe: its kernel is the project\'s own, renamed; the '
        'dispatcher takes vLLM\'s arguments."""\n'
        "import triton\nimport triton.language as tl\n\n"
        "from tuner.kernels.moe.kernel import invoke_moe_gemm\n"
        "\nCALLS = []\n\n\n"
        + _renamed_copy(VLLM_MOE.function, "fused_moe_fp8_block_kernel",
                        "tuner.kernels.moe.kernel")
        + "\n\ndef dispatch_fused_moe_kernel(A, B, C, A_scale, B_scale, B_zp, topk_weights,\n"
        "        sorted_token_ids, expert_ids, num_tokens_post_padded, mul_routed_weight, top_k,\n"
        "        config, compute_type, use_fp8_w8a8, use_int8_w8a8, use_int8_w8a16,\n"
        "        use_int4_w4a16, per_channel_quant, block_shape=None, B_bias=None):\n"
        "    assert use_fp8_w8a8 and B_zp is None and B_bias is None and C.dim() == 3\n"
        "    CALLS.append((tuple(C.shape), top_k, mul_routed_weight))\n"
        "    invoke_moe_gemm(A, A_scale, B, B_scale, C, topk_weights, sorted_token_ids,\n"
        "                    expert_ids, num_tokens_post_padded,\n"
        "                    mul_routed_weight=mul_routed_weight, top_k=top_k, config=config,\n"
        "                    block_shape=tuple(block_shape), kernel=fused_moe_kernel)\n")
    (root / "vllm" / "__init__.py").write_text(f'__version__ = "{version}"\n')
    add_selection(root)
    add_linear_kernels(root)
    return root


@contextlib.contextmanager
def importable(root: Path, monkeypatch) -> Iterator[Path]:
    """Put the stand-in built under `root` on sys.path for the block (through pytest's
    `monkeypatch`), and drop its `vllm` modules from sys.modules afterwards."""
    monkeypatch.syspath_prepend(str(root))
    importlib.invalidate_caches()
    try:
        yield root
    finally:
        for name in [n for n in sys.modules if n == "vllm" or n.startswith("vllm.")]:
            del sys.modules[name]
