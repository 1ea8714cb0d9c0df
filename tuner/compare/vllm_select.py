"""Ask the installed vLLM's own selection code which block-FP8 kernels a server runs on the GPU
it sees, for one model: each registered family's probe (`VllmServing.select`, in the family's
folder: e.g. the linear kernel of each weight shape, or the fused-MoE backend), all under a
current vLLM config whose model config carries the model's type, as a server's does. vLLM is
imported only in a child process (`python -m tuner.compare.vllm_select sm90 <model JSON>`), so
its logging, CUDA start-up or a crash stay out of `tuner doctor`; the child prints one JSON line,
family -> answer.

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
from collections.abc import Callable
from types import SimpleNamespace

from tuner.core import error_line
from tuner.kernels.registry import FAMILIES
from tuner.kernels.serving import DEFAULT_MODEL, Answer, ModelAsked

TIMEOUT_S = 180
# vLLM's logging goes to stdout; unconfigured, its INFO lines go nowhere (vllm/envs.py).
_QUIET = {"VLLM_CONFIGURE_LOGGING": "0"}


def _probes() -> dict[str, Callable[[int, ModelAsked], Answer]]:
    """family name -> its selection probe (`VllmServing.select`), in registry order."""
    return {
        name: family.serving.select
        for name, family in FAMILIES.items()
        if family.serving is not None and family.serving.select is not None
    }


def _each(why: str) -> dict[str, Answer]:
    return {name: Answer(None, reason=why) for name in _probes()}


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
        return {name: Answer(**found[name]) for name in _probes()}
    except (IndexError, ValueError, KeyError, TypeError):
        tail = (run.stderr.strip().splitlines() or ["no output"])[-1]
        return _each(f"asking vLLM's selection code failed (exit {run.returncode}: {tail[:200]})")


def _failed(exc: Exception) -> str:
    return f"vLLM's selection code failed ({error_line(exc)})"


class _NotSeen(Exception):
    """vLLM sees no GPU of the architecture asked about; str() is the reason."""


def _seen_capability(arch: str) -> int:
    """The compute capability as vLLM's int (e.g. 90) when vLLM sees a CUDA GPU of `arch`.

    Raises:
        _NotSeen: vLLM sees no CUDA GPU, or one of another architecture (the reason).
    """
    from vllm.platforms import current_platform

    capability = current_platform.get_device_capability() if current_platform.is_cuda() else None
    seen = f"sm{capability[0]}{capability[1]}" if capability is not None else None
    if capability is None or seen != arch:
        sees = f"({seen}), not {arch}" if seen else ", and it sees no CUDA GPU here"
        raise _NotSeen(f"vLLM's own selection code answers only for the GPU it sees {sees}")
    return capability[0] * 10 + capability[1]


def model_config_view(model_type: str | None) -> SimpleNamespace:
    """What vLLM's selection reads of a server's model config: `model_type` as
    `hf_text_config` and `hf_config` (its own ModelConfig needs the checkpoint's files)."""
    text = SimpleNamespace(model_type=model_type)
    return SimpleNamespace(hf_text_config=text, hf_config=text)


def server_vllm_config(model_type: str | None):
    """A context in which vLLM's current config is a `VllmConfig()` whose model config carries
    `model_type` (`model_config_view`): what a server's selection sees.

    Raises:
        Exception: whatever importing vllm.config or `VllmConfig()` raises (vLLM 0.33.0:
            "Failed to infer device type" where it sees no GPU).
    """
    from vllm.config import VllmConfig, set_current_vllm_config

    vllm_config = VllmConfig()
    vllm_config.model_config = model_config_view(model_type)  # a pydantic dataclass field
    return set_current_vllm_config(vllm_config)


def _answer(arch: str, model: ModelAsked) -> dict:
    """Each family's answer as a JSON-ready dict, asked inside a current vLLM config with the
    model's config, as a server's (`server_vllm_config`): vLLM's selection reads it
    (DeepGEMM's `can_implement`, the MoE oracle's model-type rule) and get_current_vllm_config
    raises outside set_current_vllm_config (vllm/config/vllm.py). Every failure becomes a
    family's reason."""
    try:
        capability = _seen_capability(arch)
        found = {}
        with server_vllm_config(model.model_type):
            for name, select in _probes().items():
                try:
                    found[name] = vars(select(capability, model))
                except Exception as exc:  # noqa: BLE001 - any failure of vLLM's code answers
                    found[name] = vars(Answer(None, reason=_failed(exc)))
        return found
    except _NotSeen as exc:
        why = str(exc)
    except Exception as exc:  # noqa: BLE001 - any failure of vLLM's code is the answer
        why = _failed(exc)
    return {name: vars(answer) for name, answer in _each(why).items()}


if __name__ == "__main__":
    asked = ModelAsked.from_json(sys.argv[2]) if len(sys.argv) > 2 else DEFAULT_MODEL
    print(json.dumps(_answer(sys.argv[1], asked)))
