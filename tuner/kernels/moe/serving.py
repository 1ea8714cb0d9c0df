"""How vLLM serves the fused-MoE block-FP8 layers, for `tuner doctor`
(`tuner.kernels.moe.family.MOE`'s `VllmServing` hooks): vLLM's own choice of MoE backend,
doctor's lines on it, and whether the builtin kernel compiles to vLLM's `fused_moe_kernel`.

Facts (vLLM 0.33.0): `vllm/model_executor/layers/quantization/fp8.py` (Fp8MoEMethod calls
select_fp8_moe_backend with 128x128 static FP8 weight blocks, dynamic 1x128 activations and
allow_vllm_cutlass=False) and `vllm/model_executor/layers/fused_moe/oracle/fp8.py`; vLLM reads
fused-MoE files from VLLM_TUNED_CONFIG_FOLDER first, then its package's fused_moe/configs/
(fused_moe.py, get_moe_configs).
"""

from __future__ import annotations

from typing import TypedDict

from tuner.kernels.moe.family import MOE
from tuner.kernels.serving import (
    DEFAULT_MOE,
    OWN,
    TABLE,
    Answer,
    Asked,
    Diagnosis,
    ModelAsked,
    compared_line,
    not_compared,
)


class MoeLayer(TypedDict):
    """A fused-MoE layer, as `tuner.kernels.moe.fidelity.compile_moe_pairs`'s keywords."""

    E: int  # experts
    N: int  # intermediate size per expert (tensor-parallel share)
    K: int  # hidden size
    top_k: int  # experts per token


# The fused-MoE comparison's layer: DeepSeek-V3 at tensor parallel 8 (shapes/deepseek-v3.toml;
# bench/moe_fidelity.py's "deepseek-v3 tp8"); M = 1 and 256 take vLLM's two default tilings.
MOE_COMPARED: MoeLayer = {"E": 256, "N": 256, "K": 7168, "top_k": 8}
MOE_COMPARED_M = (1, 256)


def select(capability: int, model: ModelAsked) -> Answer:
    """vLLM's choice for `model`'s fused-MoE layer with 128x128 FP8 weight blocks (ep_size 1),
    as Fp8MoEMethod makes it; a DeepSeek-V3 layer when the model has none.

    Args:
        capability: the compute capability as vLLM's int (vLLM's oracle asks its platform).
        model: the model asked about (`ModelAsked.moe`: E, N, K, top_k).

    Returns:
        The backend's name (e.g. "TRITON") and its experts class.
    """
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

    E, N, K, top_k = model.moe or DEFAULT_MOE
    layer = FusedMoEConfig(
        num_experts=E,
        experts_per_token=top_k,
        hidden_dim=K,
        intermediate_size=N,
        num_local_experts=E,
        num_logical_experts=E,
        activation=MoEActivation.SILU,
        device="cuda",
        routing_method=RoutingMethodType.DeepSeekV3,
        moe_parallel_config=FusedMoEParallelConfig.make_no_parallel(),
        in_dtype=torch.bfloat16,
    )
    backend, experts = select_fp8_moe_backend(
        layer,
        weight_key=kFp8Static128BlockSym,
        activation_key=kFp8Dynamic128Sym,
        allow_vllm_cutlass=False,
    )
    return Answer(backend.value, experts.__name__ if experts is not None else "")


def advise(out: Diagnosis, asked: Asked, answer: Answer) -> None:
    """The fused-MoE backend vLLM runs, who said so, and whether it reads the MoE files.

    Args:
        out: the diagnosis to add lines (and `helps`) to.
        asked: the architecture (`Asked.table_arch` against `VllmServing.triton_archs`).
        answer: vLLM's own selection code's answer (`select`), or Answer(None) with a reason.
    """
    say = out.lines.append
    table_triton = MOE.serving is not None and asked.table_arch in MOE.serving.triton_archs
    variable = MOE.files.tuned_folder_env
    if answer.kernel is not None:
        experts = f" ({answer.detail})" if answer.detail else ""
        say(
            f"fused-MoE block-FP8: vLLM runs {answer.kernel}{experts} by default with 128x128 "
            f"weights and ep_size 1 ({OWN})"
        )
        triton = answer.kernel == "TRITON"
    else:
        say(
            "fused-MoE block-FP8: vLLM runs "
            + (
                "Triton (fused_moe_kernel) by default with 128x128 weights and ep_size 1"
                if table_triton
                else "the first of its MoE backends that supports the GPU (not "
                "verified here for this architecture)"
            )
            + f" ({TABLE})"
        )
        if answer.reason:
            say(f"  {answer.reason}: {TABLE} answers")
        triton = table_triton
    if triton:
        say(f"  files read: yes, from ${variable} or vLLM's fused_moe/configs/")
        out.helps.append(MOE.name)
    else:
        say(f"  files read: only where vLLM picks TRITON; ${variable} names their folder")


def compare(out: Diagnosis, capability: int) -> None:
    """Compile the builtin fused-MoE kernel and vLLM's `fused_moe_kernel` with vLLM's default
    config at two M, both GEMMs each, and say whether the code is the same.

    Args:
        out: the diagnosis to add the line to.
        capability: the architecture to compile for, e.g. 90.
    """
    from tuner.kernels.moe.fidelity import compile_moe_pairs
    from tuner.kernels.moe.space import default_config

    moe = MOE.vllm
    head = f"builtin vs vLLM's fused-MoE kernel on sm{capability}"
    if moe is None:
        out.lines.append(f"{head}: not compared (the family names no vLLM kernel)")
        return
    try:
        pairs = [
            pair
            for M in MOE_COMPARED_M
            for pair in compile_moe_pairs(
                moe.module, moe.function, default_config(M), capability, M=M, **MOE_COMPARED
            )
        ]
    except Exception as exc:  # noqa: BLE001 - any import or compile failure is the finding
        out.lines.append(not_compared(head, exc))
        return
    out.lines.append(
        compared_line(
            head,
            pairs,
            "tune MoE with --kernel vllm here",
            f"in the gate_up GEMM at M={MOE_COMPARED_M[0]}, default configs at M="
            + " and ".join(map(str, MOE_COMPARED_M)),
        )
    )
