"""Ask the installed vLLM's own selection code which block-FP8 kernels it runs on the GPU it
sees: the dense linear kernel (`choose_scaled_mm_linear_kernel`) and the fused-MoE backend
(`select_fp8_moe_backend`). vLLM is imported only in a child process (`python -m
tuner.compare.vllm_select sm90`), so its logging, CUDA start-up or a crash stay out of `tuner
doctor`; the child prints one JSON line.

Facts (vLLM 0.33.0): `vllm/model_executor/kernels/linear/__init__.py` (init_fp8_linear_kernel
hands block-FP8 layers, 1x128 dynamic activation groups and 128x128 static weight blocks, to
choose_scaled_mm_linear_kernel with `_POSSIBLE_FP8_BLOCK_KERNELS` and quantization
"fp8_block_w8a8"), `vllm/model_executor/layers/quantization/fp8.py` (Fp8MoEMethod calls
select_fp8_moe_backend with those two keys and allow_vllm_cutlass=False) and
`vllm/model_executor/layers/fused_moe/oracle/fp8.py`. Most of vLLM's kernels ask
`current_platform` whether they run, not the compute capability they are given, so vLLM's code
answers only for the GPU it sees.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass

# A DeepSeek-V3-like layer (shapes/deepseek-v3.toml): N x K of a dense weight; the MoE layer's
# experts, top_k, hidden size and intermediate size (tensor parallel 1).
DENSE_WEIGHT_SHAPE = (7168, 18432)
MOE_LAYER = {"num_experts": 256, "experts_per_token": 8, "hidden_dim": 7168,
             "intermediate_size": 2048}
TIMEOUT_S = 180
# vLLM's logging goes to stdout; unconfigured, its INFO lines go nowhere (vllm/envs.py).
_QUIET = {"VLLM_CONFIGURE_LOGGING": "0"}


@dataclass(frozen=True)
class Answer:
    """One family's answer from vLLM's selection code.

    Attributes:
        kernel: the kernel class ("CutlassFp8BlockScaledMMKernel") or MoE backend ("TRITON");
            None when vLLM's code was not asked or failed.
        detail: more of vLLM's answer: the MoE experts class, or the kernels ahead of the
            dense one with vLLM's reasons for passing them over; "" when none.
        reason: why the tuner's table answers instead, one line; "" when vLLM answered.
    """

    kernel: str | None
    detail: str = ""
    reason: str = ""


def ask_vllm(arch: str) -> tuple[Answer, Answer]:
    """(dense, MoE) answers of the importable vLLM's selection code for `arch`.

    Args:
        arch: "sm90", "sm89", ...: the architecture doctor answers for.

    Returns:
        Two Answers; each carries a one-line reason instead of a kernel when vLLM sees another
        GPU (or none), when a name is missing, or when its code raises.
    """
    env = {**os.environ, **_QUIET}
    try:
        run = subprocess.run([sys.executable, "-m", "tuner.compare.vllm_select", arch],
                             env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        why = f"vLLM's selection code did not answer within {TIMEOUT_S} s"
        return Answer(None, reason=why), Answer(None, reason=why)
    lines = run.stdout.strip().splitlines()
    try:
        found = json.loads(lines[-1])
        return Answer(**found["dense"]), Answer(**found["moe"])
    except (IndexError, ValueError, KeyError, TypeError):
        tail = (run.stderr.strip().splitlines() or ["no output"])[-1]
        why = f"asking vLLM's selection code failed (exit {run.returncode}: {tail[:200]})"
        return Answer(None, reason=why), Answer(None, reason=why)


def _failed(exc: Exception) -> str:
    return (f"vLLM's selection code failed ({type(exc).__name__}: "
            f"{' '.join(str(exc).split())[:200]})")


def _seen_capability(arch: str) -> tuple[int | None, str]:
    """(compute capability as vLLM's int, e.g. 90; "") when vLLM sees a CUDA GPU of `arch`,
    else (None, why not)."""
    from vllm.platforms import current_platform

    capability = current_platform.get_device_capability() if current_platform.is_cuda() \
        else None
    if capability is None:
        return None, ("vLLM's own selection code answers only for the GPU it sees, and it sees "
                      "no CUDA GPU here")
    seen = f"sm{capability[0]}{capability[1]}"
    if seen != arch:
        return None, (f"vLLM's own selection code answers only for the GPU it sees ({seen}), "
                      f"not {arch}")
    return capability[0] * 10 + capability[1], ""


def _dense(capability: int) -> Answer:
    """vLLM's choice for a block-FP8 linear layer, as init_fp8_linear_kernel makes it."""
    import torch
    from vllm.model_executor.kernels.linear import (
        _POSSIBLE_FP8_BLOCK_KERNELS,
        choose_scaled_mm_linear_kernel,
        is_supported_and_can_implement_kernel,
    )
    from vllm.platforms import PlatformEnum

    from tuner.compare.vllm_linear import block_fp8_layer_config

    config = block_fp8_layer_config(*DENSE_WEIGHT_SHAPE, torch.bfloat16)
    chosen = choose_scaled_mm_linear_kernel(config, _POSSIBLE_FP8_BLOCK_KERNELS, capability,
                                            quantization="fp8_block_w8a8")
    passed = []
    for kernel in _POSSIBLE_FP8_BLOCK_KERNELS[PlatformEnum.CUDA]:
        if kernel is chosen:
            break
        ok, why = is_supported_and_can_implement_kernel(kernel, config, capability)
        if not ok:
            passed.append(" ".join(str(why).split()).rstrip(".")[:160])
    return Answer(chosen.__name__, "; ".join(passed))


def _moe() -> Answer:
    """vLLM's choice for a fused-MoE layer with 128x128 FP8 weight blocks, as Fp8MoEMethod
    makes it."""
    import torch
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.config import (
        FusedMoEConfig,
        FusedMoEParallelConfig,
        RoutingMethodType,
    )
    from vllm.model_executor.layers.fused_moe.oracle.fp8 import select_fp8_moe_backend
    from vllm.model_executor.layers.quantization.utils.quant_utils import (
        kFp8Dynamic128Sym,
        kFp8Static128BlockSym,
    )

    layer = FusedMoEConfig(
        **MOE_LAYER, num_local_experts=MOE_LAYER["num_experts"],
        num_logical_experts=MOE_LAYER["num_experts"], activation=MoEActivation.SILU,
        device="cuda", routing_method=RoutingMethodType.DeepSeekV3,
        moe_parallel_config=FusedMoEParallelConfig.make_no_parallel(), in_dtype=torch.bfloat16)
    backend, experts = select_fp8_moe_backend(layer, weight_key=kFp8Static128BlockSym,
                                              activation_key=kFp8Dynamic128Sym,
                                              allow_vllm_cutlass=False)
    return Answer(backend.value, experts.__name__ if experts is not None else "")


def _answer(arch: str) -> dict:
    """Both answers as JSON-ready dicts; every failure becomes a family's reason."""
    try:
        capability, why = _seen_capability(arch)
        if capability is not None:
            return _ask_both(capability)
    except Exception as exc:  # noqa: BLE001 - any failure of vLLM's code is the answer
        why = _failed(exc)
    return {"dense": vars(Answer(None, reason=why)), "moe": vars(Answer(None, reason=why))}


def _ask_both(capability: int) -> dict:
    """Each family asked inside a default vLLM config: vLLM's selection reads the current one
    (DeepGEMM's `can_implement`, the MoE oracle's model-type rule) and get_current_vllm_config
    raises outside set_current_vllm_config (vllm/config/vllm.py). It names no model."""
    from tuner.compare.vllm_linear import default_vllm_config

    found = {}
    with default_vllm_config():
        for family, ask in (("dense", lambda: _dense(capability)), ("moe", _moe)):
            try:
                found[family] = vars(ask())
            except Exception as exc:  # noqa: BLE001 - any failure of vLLM's code is the answer
                found[family] = vars(Answer(None, reason=_failed(exc)))
    return found


if __name__ == "__main__":
    print(json.dumps(_answer(sys.argv[1])))
