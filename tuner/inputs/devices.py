"""Which device a `--device` argument names, resolved once (`resolve_device`) into the
`tuner.core.ResolvedDevice` a command carries to its file names."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence

from tuner.core import (
    INTERPRETER_DEVICE_NAME,
    GpuInfo,
    ResolvedDevice,
    is_device_name,
    vllm_device_name,
)

INTERPRETER_ALIASES = frozenset({"interpreter", "cpu", INTERPRETER_DEVICE_NAME.lower()})

# NVIDIA's model names as torch.cuda.get_device_name() gives them after "NVIDIA " (e.g. "H200",
# "H100 80GB HBM3", "A100-SXM4-80GB", "L40S", "GeForce RTX 4090 D", "RTX 6000 Ada Generation"):
# a series of letters and a number, or RTX and a number, then optional parts after '_' or '-'.
# A letter right after the number is a known suffix (L40S, A10G, RTX 4090 D as a separate part),
# so a typo like "H2OO" matches no rule.
_NVIDIA_MODEL_RE = re.compile(
    r"(?:GeForce_)?(?:(?:RTX|GTX|TITAN)_?)?(?:[A-Z]{1,3}\d{1,4}(?:S|G|X|Ti|e)?|\d{3,4}(?:Ti)?)"
    r"(?:[_-][A-Za-z0-9]+)*"
)
GPU_NAME_EXAMPLES = "L20, H200, NVIDIA H200, nvidia_h200 or NVIDIA_H100_80GB_HBM3"


def gpu_device_key(name: str) -> str:
    """vLLM's device key for a GPU named by a user, who need not have it at hand.

    A name with a vendor's prefix (`NVIDIA`, `AMD`, `Intel(R)`, any case for NVIDIA) is vLLM's
    key already, spaces as '_'; a bare NVIDIA model name ("H200", "l40s", "RTX 4090") gets the
    `NVIDIA_` prefix vLLM's key has. The model part must look like an NVIDIA model name
    (`_NVIDIA_MODEL_RE`), as typed or upper-cased.

    Args:
        name: e.g. "H200", "NVIDIA H200", "nvidia_h200", "AMD_Instinct_MI300X".

    Returns:
        e.g. "NVIDIA_H200".

    Raises:
        ValueError: the name follows no rule (e.g. "H2OO", "bad name!"), one line.
    """
    key = vllm_device_name(name)
    if is_device_name(key) and key.startswith(("AMD_", "Intel(R)_")):
        return key
    model = key[len("nvidia_") :] if key.lower().startswith("nvidia_") else key
    for spelled in (model, model.upper()):
        if _NVIDIA_MODEL_RE.fullmatch(spelled) and is_device_name(f"NVIDIA_{spelled}"):
            return f"NVIDIA_{spelled}"
    raise ValueError(f"{name!r:.80} is not a GPU model name such as {GPU_NAME_EXAMPLES}")


def engine_device_name(engine: str, device_name: str, gpu_names: Iterable[str] = ()) -> str:
    """The device part `engine` puts in its file names. vLLM 0.33.0: the key itself (each run of
    whitespace or '/' of the GPU's name as one '_', `vllm_device_name`). SGLang 0.5.23:
    `get_device_name().replace(" ", "_")` of the GPU's name, taken from `gpu_names` (the names
    CUDA reported for this key's trials); it differs from the key where the name has a run of
    whitespace. Without such a name, or where SGLang's would hold a '/', the key.
    """
    if engine == "vllm":
        return device_name
    for gpu in gpu_names:
        key = gpu.replace(" ", "_")
        if gpu and vllm_device_name(gpu) == device_name and is_device_name(key):
            return key
    return device_name


def is_interpreter(device: str) -> bool:
    """True when a `--device` argument asks for the CPU interpreter backend."""
    return device.strip().lower() in INTERPRETER_ALIASES


def matches(device: str, device_name: str) -> bool:
    """True when a user's `--device` argument names this device_name.

    Case-insensitive, with or without the vendor prefix: "L20", "nvidia_l20" and
    "NVIDIA L20" all name "NVIDIA_L20"; "L20" does not name "NVIDIA_L20S".
    """
    wanted = vllm_device_name(INTERPRETER_DEVICE_NAME if is_interpreter(device) else device)
    return device_name.lower() in (wanted.lower(), f"nvidia_{wanted.lower()}")


def device_among(device: str, known: Iterable[str], *, new: bool = False) -> str:
    """The one of `known` (the store's device names, a folder's files') that a `--device`
    argument or an API path's device names: itself, else the one it `matches`; with `new`, when
    it names none, the interpreter's or the GPU model's key (`gpu_device_key`).

    Raises:
        ValueError: one line: it names several of `known`, or none (not `new`), or (`new`) a
            name that is no GPU model.
    """
    known = sorted(set(known))
    names = [device] if device in known else [n for n in known if matches(device, n)]
    if len(names) > 1:
        raise ValueError(
            f"'{device}' names {len(names)} devices in the store: "
            f"{', '.join(names)}; give one of them"
        )
    if names:
        return names[0]
    if not new:
        raise ValueError(
            f"no device in the store matches '{device}'; "
            f"known: {', '.join(known) or 'none'}; `tuner sweep --device {device}` on that GPU, "
            "or `tuner import` of its files, adds it"
        )
    return INTERPRETER_DEVICE_NAME if is_interpreter(device) else gpu_device_key(device)


def resolve_device(
    device: str,
    find_gpus: Callable[[], Sequence[GpuInfo]] | None = None,
    *,
    need_device: bool = True,
    plan_only: bool = False,
) -> tuple[ResolvedDevice, str | None]:
    """A `--device` argument ("L20", "NVIDIA H200", "interpreter") resolved once, against the
    visible GPUs, into the device the CLI, the API and the file names all take.

    `find_gpus` is called only for a GPU model with need_device or plan_only; without
    need_device a model no visible GPU matches is still taken (its key, for workers on other
    hosts); with plan_only too, with a note (the second value) that a run here would stop.
    `visible_ids`: the matching GPUs' CUDA_VISIBLE_DEVICES entries, (None,) for one unpinned
    worker.

    Raises:
        ValueError: one line: no visible GPU matches (need_device, not plan_only); a name that
            is no GPU model.
    """
    if is_interpreter(device):
        return ResolvedDevice(
            INTERPRETER_DEVICE_NAME, INTERPRETER_DEVICE_NAME, interpreter=True, visible_ids=(None,)
        ), None
    gpus = find_gpus() if find_gpus is not None and (need_device or plan_only) else []
    chosen = [gpu for gpu in gpus if matches(device, gpu.device_name)]
    if chosen:
        first = chosen[0]
        return ResolvedDevice(
            first.device_name,
            first.gpu_name,
            first.compute_capability,
            visible_ids=tuple(gpu.visible_id for gpu in chosen),
        ), None
    visible = ", ".join(sorted({gpu.device_name for gpu in gpus})) or "no CUDA GPU"
    if need_device and find_gpus is not None and not plan_only:
        raise ValueError(f"no visible GPU matches --device {device}; visible: {visible}")
    try:
        key = gpu_device_key(device)
    except ValueError as exc:
        raise ValueError(f"--device {exc}") from None
    if not (need_device and find_gpus is not None):
        return ResolvedDevice(key), None
    note = f"note: no visible GPU matches --device {device} here (visible: {visible})"
    return ResolvedDevice(key, visible_ids=(None,)), f"{note}; planned for {key}"
