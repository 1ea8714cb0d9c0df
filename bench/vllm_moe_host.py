"""vLLM's fused-MoE code as bench/moe_fidelity.py runs it: the kernel, the host function that
launches it and the routing choice, cut out of vLLM's fused_moe.py (utils.py beside it) with
bench/engine_source.py and given stand-ins for what they import. Written for vLLM 0.33.0's
files; nothing of vLLM is kept in this project.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[1]
BLOCK_SHAPE = (128, 128)
# What is cut out of vLLM's files: fused_moe.py's kernel, launch and routing choice; utils.py's
# SWAP_AB rule.
KERNEL_FUNCTIONS = ("write_zeros_to_output", "fused_moe_kernel")
HOST_FUNCTIONS = ("invoke_fused_moe_triton_kernel", "_prepare_expert_assignment")
UTILS_FUNCTIONS = ("enable_swap_ab",)


def _engine_source():
    spec = importlib.util.spec_from_file_location(
        "engine_source", REPO / "bench" / "engine_source.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Capture:
    """Stands in for a JITFunction: `capture[grid](*args, **kwargs)` records the call."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple, dict]] = []

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.calls.append((args, kwargs))


class Platform:
    """vLLM's `current_platform` as the cut code asks it: a CUDA GPU of `arch` (an int, 90 for
    sm90), or none when arch is None."""

    def __init__(self, arch: int | None = None) -> None:
        self.arch = arch

    def is_device_capability(self, capability) -> bool:
        if isinstance(capability, tuple):
            capability = capability[0] * 10 + capability[1]
        return self.arch is not None and self.arch == capability

    def is_rocm(self) -> bool:
        return False

    def is_cuda(self) -> bool:
        return self.arch is not None


def _sized_alignment(topk_ids, block_size, num_experts, expert_map=None, **_):
    """`moe_align_block_size`'s outputs as vLLM 0.33.0 allocates them
    (moe_align_block_size.py), on topk_ids' device; on "meta" only their sizes matter, on a real
    device they are computed (`tuner.kernels.moe.workload.moe_align_block_size`)."""
    import torch

    from tuner.kernels.moe.space import max_padded_slots
    from tuner.kernels.moe.workload import moe_align_block_size

    if topk_ids.device.type != "meta":
        return moe_align_block_size(topk_ids, block_size, num_experts)
    padded = max_padded_slots(topk_ids.numel(), num_experts, block_size)
    return (
        torch.empty(padded, dtype=torch.int32, device="meta"),
        torch.empty(-(-padded // block_size), dtype=torch.int32, device="meta"),
        torch.empty(1, dtype=torch.int32, device="meta"),
    )


def load_vllm(path: Path, arch: int | None = None) -> SimpleNamespace:
    """vLLM's fused-MoE kernel, launch and routing choice from its fused_moe.py (utils.py beside
    it), run with this Triton.

    Returns:
        `.kernel` (the JITFunction fused_moe_kernel), `.module` (the cut module: its
        `invoke_fused_moe_triton_kernel` launches `.module.fused_moe_kernel`, which a caller may
        replace by a `Capture`) and `.platform` (set `.platform.arch` to the architecture the
        host code sees).

    Raises:
        FileNotFoundError: no such file, or no utils.py beside it.
        LookupError: a function is missing from the files.
    """
    import torch
    import triton
    import triton.language as tl

    es = _engine_source()
    path = Path(path)
    text, utils = path.read_text(), (path.parent / "utils.py").read_text()
    seen = Platform(arch)
    quiet = SimpleNamespace(
        **{
            name: (lambda *args, **kwargs: None)
            for name in ("info", "info_once", "warning", "warning_once")
        }
    )
    swap = es.load(
        utils,
        UTILS_FUNCTIONS,
        {"torch": torch, "current_platform": seen},
        filename=str(path.parent / "utils.py"),
        module="vllm_fused_moe_utils",
    )
    # vLLM caches enable_swap_ab (functools.lru_cache), right where the capability is fixed
    # for a process; here the architecture changes between launches, so the cache is skipped.
    swap_ab = getattr(swap.enable_swap_ab, "__wrapped__", swap.enable_swap_ab)
    given = {
        "torch": torch,
        "triton": triton,
        "tl": tl,
        "current_platform": seen,
        "logger": quiet,
        "enable_swap_ab": swap_ab,
        "resolve_moe_use_td": lambda: False,
        "warn_if_moe_use_td_ineffective": lambda *args, **kwargs: None,
        "set_triton_allocator": lambda *args, **kwargs: None,
        "moe_align_block_size": _sized_alignment,
    }
    module = es.load(
        text, KERNEL_FUNCTIONS + HOST_FUNCTIONS, given, filename=str(path), module="vllm_fused_moe"
    )
    return SimpleNamespace(kernel=module.fused_moe_kernel, module=module, platform=seen)


def load_vllm_kernel(path: Path):
    """vLLM's `fused_moe_kernel` alone (a JITFunction), cut out of its fused_moe.py.

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file lacks `fused_moe_kernel` or `write_zeros_to_output`.
    """
    import triton
    import triton.language as tl

    path = Path(path)
    try:
        module = _engine_source().load(
            path.read_text(),
            KERNEL_FUNCTIONS,
            {"triton": triton, "tl": tl},
            filename=str(path),
            module="vllm_fused_moe_kernel",
        )
    except LookupError as exc:
        missing = str(exc).rsplit("top-level ", 1)[-1]
        raise ValueError(f"{path} has no {missing}") from exc
    return module.fused_moe_kernel


def vllm_routing(vllm: SimpleNamespace, topk_ids, config: dict, E: int) -> tuple:
    """(sorted_token_ids or None, expert_ids, num_tokens_post_padded) as vLLM's own
    `_prepare_expert_assignment` makes them for topk_ids [M, top_k] (no expert map, weights on
    the device)."""
    M, top_k = topk_ids.shape
    return vllm.module._prepare_expert_assignment(
        topk_ids, config, M, top_k, E, None, ignore_invalid_experts=True
    )


def vllm_launch(vllm: SimpleNamespace, launch: dict, routing: tuple, config: dict) -> None:
    """One expert GEMM by vLLM's own `invoke_fused_moe_triton_kernel` on its fp8_w8a8 block
    path, as its `fused_experts_impl` calls it (bf16 compute type, no bias, no zero points);
    it launches whatever `vllm.module.fused_moe_kernel` is."""
    import triton.language as tl

    vllm.module.invoke_fused_moe_triton_kernel(
        launch["A"],
        launch["B"],
        launch["C"],
        launch["A_scale"],
        launch["B_scale"],
        launch["topk_weights"],
        *routing,
        launch["mul_routed_weight"],
        launch["top_k"],
        dict(config),
        tl.bfloat16,
        True,
        False,
        False,
        False,
        False,
        list(BLOCK_SHAPE),
    )


def vllm_call(
    vllm: SimpleNamespace, launch: dict, routing: tuple, config: dict
) -> tuple[tuple, dict]:
    """(args, kwargs) vLLM's own host code passes to `fused_moe_kernel`, captured."""
    capture, real = Capture(), vllm.module.fused_moe_kernel
    vllm.module.fused_moe_kernel = capture
    try:
        vllm_launch(vllm, launch, routing, config)
    finally:
        vllm.module.fused_moe_kernel = real
    return capture.calls[0]
