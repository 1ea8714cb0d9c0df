"""A stand-in vLLM for tests: a package in a temporary folder with vLLM 0.33.0's module paths and
distribution metadata. Its Triton kernels take vLLM's parameter lists and compute with the
project's own kernels (the dense one is our kernel's text under vLLM's name; the fused-MoE one
under vLLM's name and parameter list), so their source text, and hash, is their own; they import
triton from `vllm.triton_utils`, which hands out a placeholder where the test says no GPU
driver is active, as vLLM's does; its `dispatch_fused_moe_kernel` launches as vLLM's does. No
vLLM code: only its module paths, names, signatures and behaviour (facts from vLLM 0.33.0's
fp8_utils.py, fused_moe.py, fused_moe/utils.py and triton_utils)."""

from __future__ import annotations

import ast
import contextlib
import importlib
import inspect
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

from tests.standin_vllm_parts import (  # noqa: F401 - the variables: for tests
    CAPABILITY_VARIABLE,
    NO_DRIVER_VARIABLE,
    add_basics,
    module_path,
)
from tests.standin_vllm_select import add_selection
from tuner.kernels.dense.family import DENSE, VLLM_DENSE
from tuner.kernels.moe.family import VLLM_MOE
from tuner.kernels.source import function_source

VERSION = "0.33.0"

# vLLM 0.33.0's `fused_moe_kernel` parameters, in order, with their defaults (fused_moe.py):
# (name, constexpr, default source or None).
_PLAIN = """a_ptr b_ptr c_ptr b_bias_ptr a_scale_ptr b_scale_ptr topk_weights_ptr
sorted_token_ids_ptr expert_ids_ptr num_tokens_post_padded_ptr N K EM num_valid_tokens stride_am
stride_ak stride_be stride_bk stride_bn stride_cm stride_cn stride_asm stride_ask stride_bse
stride_bsk stride_bsn stride_bbe stride_bbn"""
_CONSTEXPR = """group_n group_k naive_block_assignment BLOCK_SIZE_M BLOCK_SIZE_N BLOCK_SIZE_K
GROUP_SIZE_M SPLIT_K MUL_ROUTED_WEIGHT top_k compute_type use_fp8_w8a8 use_int8_w8a8
use_int8_w8a16 per_channel_quant HAS_BIAS SWAP_AB"""
VLLM_MOE_PARAMETERS: tuple[tuple[str, bool, str | None], ...] = (
    *((name, False, None) for name in _PLAIN.split()),
    *((name, True, None) for name in _CONSTEXPR.split()),
    ("USE_TD", True, "False"),
)


def _under_vllms_parameters(name: str, ours: str, module: str) -> str:
    """Our kernel `module.ours`'s own text under the name `name` and vLLM 0.33.0's parameter
    list (`VLLM_MOE_PARAMETERS`): a Triton kernel whose body, and so compiled code, is ours
    (a delegating wrapper's is not quite), called with vLLM's arguments, whose source text and
    hash are its own. vLLM's extra parameters (bias, SPLIT_K, compute_type, the quantization
    flags, USE_TD) are taken and left unused.

    Raises:
        LookupError: our kernel has a parameter vLLM's does not (the two have drifted apart).
    """
    fn = getattr(importlib.import_module(module), ours).fn
    text = textwrap.dedent(inspect.getsource(fn))
    ours_params = list(inspect.signature(fn).parameters)
    theirs = [p for p, _, _ in VLLM_MOE_PARAMETERS]
    missing = [p for p in ours_params if p not in theirs]
    if missing:
        raise LookupError(f"{ours} has parameters vLLM 0.33.0's fused_moe_kernel lacks: {missing}")
    node = ast.parse(text).body[0]
    assert isinstance(node, ast.FunctionDef)
    lines = text.splitlines(keepends=True)
    header = ",\n".join(
        f"    {p}: tl.constexpr" + (f" = {default}" if default else "") if constexpr else f"    {p}"
        for p, constexpr, default in VLLM_MOE_PARAMETERS
    )
    decorators = "".join(lines[: node.lineno - 1])
    body = "".join(lines[node.body[0].lineno - 1 :])
    return f"{decorators}def {name}(\n{header},\n):\n{body}"


# vLLM 0.33.0's launch of fused_moe_kernel (fused_moe.py invoke_fused_moe_triton_kernel, called
# by dispatch_fused_moe_kernel on the fp8_w8a8 path; fused_moe/utils.py enable_swap_ab): EM is
# len(sorted_token_ids), cut to rows * top_k * BLOCK_SIZE_M when A has fewer rows than
# BLOCK_SIZE_M, or rows * top_k * BLOCK_SIZE_M without sorted_token_ids (naive assignment);
# SPLIT_K = 1; BLOCK_SIZE_K at most min(block_shape); SWAP_AB on compute capability 90 for
# BLOCK_SIZE_M < 64 and BLOCK_SIZE_N >= 64; B_scale's N stride 0 when B_scale has one N group.
_MOE_LAUNCH = """


def _swap_ab(block_m, block_n):
    return current_platform.is_device_capability(90) and block_m < 64 and block_n >= 64


def invoke_fused_moe_triton_kernel(A, B, C, A_scale, B_scale, topk_weights, sorted_token_ids,
                                   expert_ids, num_tokens_post_padded, mul_routed_weight,
                                   top_k, config, compute_type, use_fp8_w8a8, use_int8_w8a8,
                                   use_int8_w8a16, use_int4_w4a16, per_channel_quant,
                                   block_shape=None, B_bias=None):
    rows, slots = A.size(0), A.size(0) * top_k
    block_m = config["BLOCK_SIZE_M"]
    if sorted_token_ids is None:
        EM = slots * block_m
    else:
        EM = sorted_token_ids.size(0)
        if rows < block_m:
            EM = min(EM, slots * block_m)
    meta = dict(config, SPLIT_K=1)
    block_k = meta.pop("BLOCK_SIZE_K")
    if block_shape is not None:
        block_k = min(block_k, *block_shape)
    grid = (triton.cdiv(EM, block_m) * triton.cdiv(B.size(1), config["BLOCK_SIZE_N"]),)
    fused_moe_kernel[grid](
        A, B, C, B_bias, A_scale, B_scale, topk_weights, sorted_token_ids, expert_ids,
        num_tokens_post_padded, B.size(1), B.size(2), EM, slots,
        A.stride(0), A.stride(1), B.stride(0), B.stride(2), B.stride(1), C.stride(1),
        C.stride(2), A_scale.stride(0), A_scale.stride(1), B_scale.stride(0),
        B_scale.stride(2), B_scale.stride(1) if B_scale.size(1) > 1 else 0, 0, 0,
        block_shape[0], block_shape[1],
        MUL_ROUTED_WEIGHT=mul_routed_weight, top_k=top_k, compute_type=compute_type,
        use_fp8_w8a8=use_fp8_w8a8, use_int8_w8a8=use_int8_w8a8,
        use_int8_w8a16=use_int8_w8a16, per_channel_quant=per_channel_quant,
        naive_block_assignment=sorted_token_ids is None, HAS_BIAS=B_bias is not None,
        BLOCK_SIZE_K=block_k, SWAP_AB=_swap_ab(block_m, config["BLOCK_SIZE_N"]),
        USE_TD=False, **meta)


def dispatch_fused_moe_kernel(A, B, C, A_scale, B_scale, B_zp, topk_weights,
                              sorted_token_ids, expert_ids, num_tokens_post_padded,
                              mul_routed_weight, top_k, config, compute_type, use_fp8_w8a8,
                              use_int8_w8a8, use_int8_w8a16, use_int4_w4a16, per_channel_quant,
                              block_shape=None, B_bias=None):
    assert use_fp8_w8a8 and B_zp is None and B_bias is None and C.dim() == 3
    invoke_fused_moe_triton_kernel(
        A, B, C, A_scale, B_scale, topk_weights, sorted_token_ids, expert_ids,
        num_tokens_post_padded, mul_routed_weight, top_k, config, compute_type, use_fp8_w8a8,
        use_int8_w8a8, use_int8_w8a16, use_int4_w4a16, per_channel_quant, block_shape, B_bias)
"""


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
        f"Requires-Dist: torch==2.14.0\nRequires-Dist: triton=={triton_pin}\n"
    )
    (info / "RECORD").write_text("")
    dense = module_path(root, VLLM_DENSE.module)
    text = DENSE.module_path(DENSE.kernel_module).read_text()
    ours = function_source(text, DENSE.kernel_function)
    dense.write_text(
        "# Stand-in of vLLM's fp8_utils: its dense kernel is the project's own under vLLM's\n"
        "# name (vLLM's takes the same parameters).\n"
        "from vllm.triton_utils import tl, triton\n\n\n"
        + ours.replace(f"def {DENSE.kernel_function}(", f"def {VLLM_DENSE.function}(")
    )
    moe = module_path(root, VLLM_MOE.module)
    moe.write_text(
        "# Stand-in of vLLM's fused_moe: its kernel is the project's own under vLLM's name and\n"
        "# parameters; its dispatcher takes vLLM's arguments and launches as vLLM's does.\n"
        "from vllm.platforms import current_platform\n"
        "from vllm.triton_utils import tl, triton\n\n\n"
        + _under_vllms_parameters(
            VLLM_MOE.function, "fused_moe_fp8_block_kernel", "tuner.kernels.moe.kernel"
        )
        + _MOE_LAUNCH
    )
    (root / "vllm" / "__init__.py").write_text(f'__version__ = "{version}"\n')
    add_basics(root)
    add_selection(root)
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
