"""Ask the installed vLLM's own selection code which block-FP8 kernels a server runs on the GPU
it sees, for one model: each registered family's probe (`VllmServing.select`: the dense linear
kernel of each weight shape, `tuner.compare.serving_dense`; the fused-MoE backend,
`tuner.compare.serving_moe`), all under a current vLLM config whose model config carries the
model's type, as a server's does. vLLM is imported only in a child process (`python -m
tuner.compare.vllm_select sm90 <model JSON>`), so its logging, CUDA start-up or a crash stay out
of `tuner doctor`; the child prints one JSON line, family -> answer.

Facts (vLLM 0.33.0): `kernels/linear/scaled_mm/deep_gemm.py` (DeepGEMM's can_implement refuses
without a model config, reads `hf_text_config.model_type` and the weight shape). Most of vLLM's
kernels ask `current_platform` whether they run, not the compute capability they are given, so
vLLM's code answers only for the GPU it sees.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from typing import Any

from tuner.kernels.family import load_hook
from tuner.kernels.registry import FAMILIES

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
        """The model `to_json` wrote (its JSON lists read back as tuples)."""
        return cls(**{name: _tuples(value) for name, value in json.loads(text).items()})

    @classmethod
    def of(cls, shapes) -> ModelAsked:
        """The model of a `tuner.inputs.shapes.ModelShapes` (its first MoE shape, if any)."""
        return cls(
            f"{shapes.model} TP {shapes.tp}",
            shapes.model_type,
            tuple(shapes.shapes),
            tuple(shapes.moe[0]) if shapes.moe else None,
        )


def _tuples(value: Any) -> Any:
    """`value` with every JSON list in it turned into a tuple."""
    return tuple(_tuples(item) for item in value) if isinstance(value, list) else value


# Without --model: one DeepSeek-V3 layer (shapes/deepseek-v3.toml: model_type deepseek_v3, a
# dense weight N x K at TP 1, the routed experts E, N = moe_intermediate_size, hidden, top_k).
DEFAULT_DENSE = ((7168, 18432),)
DEFAULT_MOE = (256, 2048, 7168, 8)
DEFAULT_MODEL = ModelAsked(
    "one DeepSeek-V3 layer", "deepseek_v3", DEFAULT_DENSE, DEFAULT_MOE, given=False
)


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


def _probes() -> dict[str, str]:
    """family name -> its selection probe (`VllmServing.select`), in registry order."""
    return {
        name: family.serving.select
        for name, family in FAMILIES.items()
        if family.serving is not None and family.serving.select is not None
    }


def _asked() -> list[str]:
    """The registered families with a selection probe, in order."""
    return list(_probes())


def _each(why: str) -> dict[str, Answer]:
    return {name: Answer(None, reason=why) for name in _asked()}


def ask_vllm(arch: str, model: ModelAsked = DEFAULT_MODEL) -> dict[str, Answer]:
    """Each family's answer of the importable vLLM's selection code for `arch` and `model`.

    Args:
        arch: "sm90", "sm89", ...: the architecture doctor answers for.
        model: the model whose layers are asked about.

    Returns:
        family name -> Answer, for each family with a probe; each carries a one-line reason
        instead of a kernel when vLLM sees another GPU (or none), when a name is missing, or
        when its code raises.
    """
    env = {**os.environ, **_QUIET}
    try:
        run = subprocess.run(
            [sys.executable, "-m", "tuner.compare.vllm_select", arch, model.to_json()],
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return _each(f"vLLM's selection code did not answer within {TIMEOUT_S} s")
    lines = run.stdout.strip().splitlines()
    try:
        found = json.loads(lines[-1])
        return {name: Answer(**found[name]) for name in _asked()}
    except (IndexError, ValueError, KeyError, TypeError):
        tail = (run.stderr.strip().splitlines() or ["no output"])[-1]
        return _each(f"asking vLLM's selection code failed (exit {run.returncode}: {tail[:200]})")


def _failed(exc: Exception) -> str:
    return (
        f"vLLM's selection code failed ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})"
    )


def _seen_capability(arch: str) -> tuple[int | None, str]:
    """(compute capability as vLLM's int, e.g. 90; "") when vLLM sees a CUDA GPU of `arch`,
    else (None, why not)."""
    from vllm.platforms import current_platform

    capability = current_platform.get_device_capability() if current_platform.is_cuda() else None
    if capability is None:
        return None, (
            "vLLM's own selection code answers only for the GPU it sees, and it sees "
            "no CUDA GPU here"
        )
    seen = f"sm{capability[0]}{capability[1]}"
    if seen != arch:
        return None, (
            f"vLLM's own selection code answers only for the GPU it sees ({seen}), not {arch}"
        )
    return capability[0] * 10 + capability[1], ""


def _answer(arch: str, model: ModelAsked) -> dict:
    """Both answers as JSON-ready dicts; every failure becomes a family's reason."""
    try:
        capability, why = _seen_capability(arch)
        if capability is not None:
            return _ask_all(capability, model)
    except Exception as exc:  # noqa: BLE001 - any failure of vLLM's code is the answer
        why = _failed(exc)
    return {name: vars(answer) for name, answer in _each(why).items()}


def _ask_all(capability: int, model: ModelAsked) -> dict:
    """Each family asked inside a current vLLM config with the model's config, as a server's
    (`tuner.compare.vllm_linear.server_vllm_config`): vLLM's selection reads it (DeepGEMM's
    `can_implement`, the MoE oracle's model-type rule) and get_current_vllm_config raises
    outside set_current_vllm_config (vllm/config/vllm.py)."""
    from tuner.compare.vllm_linear import server_vllm_config

    found = {}
    with server_vllm_config(model.model_type):
        for name, select in _probes().items():
            try:
                found[name] = vars(load_hook(select)(capability, model))
            except Exception as exc:  # noqa: BLE001 - any failure of vLLM's code is the answer
                found[name] = vars(Answer(None, reason=_failed(exc)))
    return found


if __name__ == "__main__":
    asked = ModelAsked.from_json(sys.argv[2]) if len(sys.argv) > 2 else DEFAULT_MODEL
    print(json.dumps(_answer(sys.argv[1], asked)))
