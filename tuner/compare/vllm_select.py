"""Ask the installed vLLM's own selection code which block-FP8 kernels a server runs on the GPU
it sees, for one model: the dense linear kernel of each weight shape
(`choose_scaled_mm_linear_kernel`) and the fused-MoE backend (`select_fp8_moe_backend`), both
under a current vLLM config whose model config carries the model's type, as a server's does.
vLLM is imported only in a child process (`python -m tuner.compare.vllm_select sm90 <model
JSON>`), so its logging, CUDA start-up or a crash stay out of `tuner doctor`; the child prints
one JSON line.

Facts (vLLM 0.33.0): `vllm/model_executor/kernels/linear/__init__.py` (init_fp8_linear_kernel
hands block-FP8 layers, 1x128 dynamic activation groups and 128x128 static weight blocks, to
choose_scaled_mm_linear_kernel with `_POSSIBLE_FP8_BLOCK_KERNELS` and quantization
"fp8_block_w8a8"; the list is reordered by `_resolve_backend_kernels`, Humming ahead of
Marlin on sm90, before it is walked), `kernels/linear/scaled_mm/deep_gemm.py` (DeepGEMM's
can_implement refuses without a model config, reads `hf_text_config.model_type` and the weight
shape), `vllm/model_executor/layers/quantization/fp8.py` (Fp8MoEMethod calls
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
from collections import Counter
from dataclasses import asdict, dataclass

TIMEOUT_S = 180
# vLLM's logging goes to stdout; unconfigured, its INFO lines go nowhere (vllm/envs.py).
_QUIET = {"VLLM_CONFIGURE_LOGGING": "0"}


@dataclass(frozen=True)
class ModelAsked:
    """The model vLLM's selection is asked about.

    Attributes:
        label: how lines name it, e.g. "deepseek-v3 TP 8".
        model_type: its Hugging Face model type (e.g. "deepseek_v3"); None when not known.
        dense: (N, K) of its block-FP8 linear weights.
        moe: (E, N, K, top_k) of its fused-MoE experts (N per rank, K the hidden size), or None.
        given: the user named it (--model); False for `DEFAULT_MODEL`.
    """

    label: str
    model_type: str | None
    dense: tuple[tuple[int, int], ...]
    moe: tuple[int, int, int, int] | None
    given: bool = True

    def to_json(self) -> str:
        """The model as one JSON text (`from_json` reads it back)."""
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ModelAsked:
        """The model `to_json` wrote."""
        data = json.loads(text)
        moe = data["moe"]
        return cls(data["label"], data["model_type"], tuple(tuple(s) for s in data["dense"]),
                   tuple(moe) if moe else None, data["given"])

    @classmethod
    def of(cls, shapes) -> ModelAsked:
        """The model of a `tuner.inputs.shapes.ModelShapes` (its first MoE shape, if any)."""
        return cls(f"{shapes.model} TP {shapes.tp}", shapes.model_type, tuple(shapes.shapes),
                   tuple(shapes.moe[0]) if shapes.moe else None)


# Without --model: one DeepSeek-V3 layer (shapes/deepseek-v3.toml: model_type deepseek_v3, a
# dense weight N x K at TP 1, the routed experts E, N = moe_intermediate_size, hidden, top_k).
DEFAULT_DENSE = ((7168, 18432),)
DEFAULT_MOE = (256, 2048, 7168, 8)
DEFAULT_MODEL = ModelAsked("one DeepSeek-V3 layer", "deepseek_v3", DEFAULT_DENSE, DEFAULT_MOE,
                           given=False)


@dataclass(frozen=True)
class Answer:
    """One family's answer from vLLM's selection code.

    Attributes:
        kernel: the kernel class ("DeepGemmFp8BlockScaledMMKernel") or MoE backend ("TRITON");
            for dense layers the one chosen for most of the model's shapes; None when vLLM's
            code was not asked or failed.
        detail: more of vLLM's answer: the MoE experts class, or the kernels it tried before
            the dense one (in its order) with its reasons for passing them over; "" when none.
        reason: why the tuner's table answers instead, one line; "" when vLLM answered.
        others: the shapes for which vLLM chose another dense kernel, e.g.
            "CutlassFp8BlockScaledMMKernel for N=576,K=256"; "" when none.
    """

    kernel: str | None
    detail: str = ""
    reason: str = ""
    others: str = ""


def ask_vllm(arch: str, model: ModelAsked = DEFAULT_MODEL) -> tuple[Answer, Answer]:
    """(dense, MoE) answers of the importable vLLM's selection code for `arch` and `model`.

    Args:
        arch: "sm90", "sm89", ...: the architecture doctor answers for.
        model: the model whose layers are asked about.

    Returns:
        Two Answers; each carries a one-line reason instead of a kernel when vLLM sees another
        GPU (or none), when a name is missing, or when its code raises.
    """
    env = {**os.environ, **_QUIET}
    try:
        run = subprocess.run([sys.executable, "-m", "tuner.compare.vllm_select", arch,
                              model.to_json()], env=env, capture_output=True, text=True,
                             timeout=TIMEOUT_S)
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


def _walk_order(linear, capability: int) -> list:
    """vLLM's block-FP8 kernels for the current platform in the order its selection tries
    them: after `_resolve_backend_kernels` (the Humming reordering, the linear backend) where
    this vLLM has it, else as listed."""
    from vllm.platforms import current_platform

    kernels = list(linear._POSSIBLE_FP8_BLOCK_KERNELS.get(current_platform._enum, []))
    resolve = getattr(linear, "_resolve_backend_kernels", None)
    if resolve is None:
        return kernels
    return list(resolve(kernels, "scaled-mm", quantization="fp8_block_w8a8",
                        compute_capability=capability))


def _passed_over(linear, chosen, config, capability: int) -> str:
    """The kernels vLLM tried before `chosen`, with its reasons, in its order."""
    passed = []
    for kernel in _walk_order(linear, capability):
        if kernel is chosen:
            break
        ok, why = linear.is_supported_and_can_implement_kernel(kernel, config, capability)
        if not ok:
            passed.append(" ".join(str(why).split()).rstrip(".")[:200])
    return "; ".join(passed)


def _dense(capability: int, model: ModelAsked) -> Answer:
    """vLLM's choice for each block-FP8 linear layer of `model`, as init_fp8_linear_kernel
    makes it (bf16 in and out, as served); a DeepSeek-V3 layer's when it lists none."""
    import torch
    from vllm.model_executor.kernels import linear

    from tuner.compare.vllm_linear import block_fp8_layer_config

    chosen: dict[tuple[int, int], object] = {}
    configs = {}
    for N, K in model.dense or DEFAULT_DENSE:
        configs[(N, K)] = block_fp8_layer_config(N, K, torch.bfloat16)
        chosen[(N, K)] = linear.choose_scaled_mm_linear_kernel(
            configs[(N, K)], linear._POSSIBLE_FP8_BLOCK_KERNELS, capability,
            quantization="fp8_block_w8a8")
    counts = Counter(chosen.values())
    main = max(counts, key=lambda kernel: counts[kernel])  # the first of the most common
    first = next(shape for shape, kernel in chosen.items() if kernel is main)
    others: dict[str, list[str]] = {}
    for (N, K), kernel in chosen.items():
        if kernel is not main:
            others.setdefault(getattr(kernel, "__name__", str(kernel)), []).append(
                f"N={N},K={K}")
    return Answer(main.__name__, _passed_over(linear, main, configs[first], capability),
                  others="; ".join(f"{name} for {' and '.join(shapes)}"
                                   for name, shapes in others.items()))


def _moe(model: ModelAsked) -> Answer:
    """vLLM's choice for `model`'s fused-MoE layer with 128x128 FP8 weight blocks (ep_size 1),
    as Fp8MoEMethod makes it; a DeepSeek-V3 layer when the model has none."""
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
        num_experts=E, experts_per_token=top_k, hidden_dim=K, intermediate_size=N,
        num_local_experts=E, num_logical_experts=E, activation=MoEActivation.SILU,
        device="cuda", routing_method=RoutingMethodType.DeepSeekV3,
        moe_parallel_config=FusedMoEParallelConfig.make_no_parallel(), in_dtype=torch.bfloat16)
    backend, experts = select_fp8_moe_backend(layer, weight_key=kFp8Static128BlockSym,
                                              activation_key=kFp8Dynamic128Sym,
                                              allow_vllm_cutlass=False)
    return Answer(backend.value, experts.__name__ if experts is not None else "")


def _answer(arch: str, model: ModelAsked) -> dict:
    """Both answers as JSON-ready dicts; every failure becomes a family's reason."""
    try:
        capability, why = _seen_capability(arch)
        if capability is not None:
            return _ask_both(capability, model)
    except Exception as exc:  # noqa: BLE001 - any failure of vLLM's code is the answer
        why = _failed(exc)
    return {"dense": vars(Answer(None, reason=why)), "moe": vars(Answer(None, reason=why))}


def _ask_both(capability: int, model: ModelAsked) -> dict:
    """Each family asked inside a current vLLM config with the model's config, as a server's
    (`tuner.compare.vllm_linear.server_vllm_config`): vLLM's selection reads it (DeepGEMM's
    `can_implement`, the MoE oracle's model-type rule) and get_current_vllm_config raises
    outside set_current_vllm_config (vllm/config/vllm.py)."""
    from tuner.compare.vllm_linear import server_vllm_config

    found = {}
    with server_vllm_config(model.model_type):
        for family, ask in (("dense", lambda: _dense(capability, model)),
                            ("moe", lambda: _moe(model))):
            try:
                found[family] = vars(ask())
            except Exception as exc:  # noqa: BLE001 - any failure of vLLM's code is the answer
                found[family] = vars(Answer(None, reason=_failed(exc)))
    return found


if __name__ == "__main__":
    asked = ModelAsked.from_json(sys.argv[2]) if len(sys.argv) > 2 else DEFAULT_MODEL
    print(json.dumps(_answer(sys.argv[1], asked)))
