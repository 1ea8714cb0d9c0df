"""Which kernel vLLM runs by default for a block-FP8 linear layer on this GPU, and whether
`--linear-backend triton` with the tuned files beats it, per M and for decode and prefill.

vLLM's own selection is asked when it is importable and sees the GPU (vLLM 0.33.0,
vllm/model_executor/kernels/linear/__init__.py: `choose_scaled_mm_linear_kernel` over
`_POSSIBLE_FP8_BLOCK_KERNELS`, quantization "fp8_block_w8a8"), under a current `VllmConfig`
with a model config of the model's type, as a server's
(`tuner.compare.vllm_linear.server_vllm_config`: DeepGEMM's `can_implement` reads the model
config and refuses without one; the linear backend is "auto", i.e. the default); else the
tuner's table of vLLM 0.33.0 per shape (`tuner.kernels.vllm_table.table_dense_kernel`)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from tuner.compare.kernel_names import (
    TRITON_TUNED,
    VLLM_CUTLASS,
    VLLM_DEEPGEMM,
    VLLM_HUMMING,
    VLLM_MARLIN,
)
from tuner.compare.versus import DECODE_MAX_M, PREFILL_MIN_M, ComparePoint
from tuner.core import geomean
from tuner.kernels.vllm_table import table_dense_kernel

# vLLM 0.33.0 class name (kernels/linear/scaled_mm/*.py) -> the compare backend that times it.
# Its Triton kernel reads the tuned files: there the default is already what the flag gives.
KERNEL_BACKENDS = {
    "DeepGemmFp8BlockScaledMMKernel": VLLM_DEEPGEMM,
    "CutlassFp8BlockScaledMMKernel": VLLM_CUTLASS,
    "MarlinFP8ScaledMMLinearKernel": VLLM_MARLIN,
    "HummingFP8ScaledMMLinearKernel": VLLM_HUMMING,
    "TritonFp8BlockScaledMMKernel": TRITON_TUNED,
}
BY_SELECTION = "vLLM's own selection"
BY_TABLE = "the tuner's table of vLLM 0.33.0"

_LINEAR = "vllm.model_executor.kernels.linear"


@dataclass(frozen=True)
class VllmDefault:
    """vLLM's default kernel for one (N, K).

    Attributes:
        backends: the compare backends that time it, in order of preference (the table gives
            two on sm90); empty when compare times none of them.
        kernel: vLLM's class name; None when unknown.
        source: BY_SELECTION or BY_TABLE.
        reason: why the table answered (vLLM's selection not importable, or sees no GPU, or
            failed), one line; "" when vLLM's selection answered.
    """

    backends: tuple[str, ...]
    kernel: str | None
    source: str
    reason: str = ""


def vllm_choice(N: int, K: int, out_dtype: str, model_type: str | None = None) -> str:
    """The class vLLM 0.33.0 selects for a block-FP8 linear layer with weight [N, K] here, as
    a server of a model of `model_type` selects it (input and output in out_dtype).

    Raises:
        Exception: whatever importing vLLM, building its config ("Failed to infer device type"
            without a GPU) or its selection raises (ValueError when no kernel can implement
            the layer).
    """
    import torch

    from tuner.compare.vllm_linear import server_vllm_config
    from tuner.kernels.vllm_layers import block_fp8_layer_config

    linear = importlib.import_module(_LINEAR)
    config = block_fp8_layer_config(N, K, getattr(torch, out_dtype))
    with server_vllm_config(model_type):
        chosen = linear.choose_scaled_mm_linear_kernel(
            config, linear._POSSIBLE_FP8_BLOCK_KERNELS, quantization="fp8_block_w8a8"
        )
    return chosen.__name__


def _capability_int(compute_capability: str | None) -> int | None:
    """90 for "9.0"; None for "" (the interpreter) or an unreadable value."""
    major, _, minor = (compute_capability or "").partition(".")
    return int(major) * 10 + int(minor) if major.isdigit() and minor.isdigit() else None


def _table(
    N: int, K: int, capability: int | None, out_dtype: str, model_type: str | None, reason: str
) -> VllmDefault:
    name = (
        table_dense_kernel(capability, N, K, out_dtype, model_type)
        if capability is not None
        else None
    )
    backend = KERNEL_BACKENDS.get(name or "")
    return VllmDefault((backend,) if backend else (), name, BY_TABLE, reason)


def default_kernels(
    shapes: Iterable[tuple[int, int]],
    compute_capability: str | None,
    out_dtype: str,
    *,
    model_type: str | None = None,
    choose: Callable[..., str] | None = None,
) -> dict[tuple[int, int], VllmDefault]:
    """vLLM's default kernel per (N, K): its own selection when that runs here (asked as a
    server of the model asks it), else the tuner's table per shape.

    Args:
        shapes: the (N, K) of the model.
        compute_capability: the GPU's, e.g. "9.0"; "" or None when unknown (the interpreter).
        out_dtype: "bfloat16" or "float16".
        model_type: the model's Hugging Face model type (`ModelShapes.model_type`); None when
            not known.
        choose: (N, K, out_dtype, model_type) -> vLLM class name; `vllm_choice` when None.

    Returns:
        (N, K) -> VllmDefault; the table's carry the one-line reason vLLM's did not answer.
    """
    choose = choose or vllm_choice
    capability = _capability_int(compute_capability)
    result = {}
    for N, K in shapes:
        try:
            name = choose(N, K, out_dtype, model_type)
        except Exception as exc:  # noqa: BLE001 - no vLLM here, or its selection failed
            why = " ".join(str(exc).split())[:160]
            result[(N, K)] = _table(
                N,
                K,
                capability,
                out_dtype,
                model_type,
                f"vLLM's selection did not answer here ({type(exc).__name__}: {why})",
            )
            continue
        backend = KERNEL_BACKENDS.get(name)
        result[(N, K)] = VllmDefault((backend,) if backend else (), name, BY_SELECTION)
    return result


def table_reasons(defaults: Mapping[tuple[int, int], VllmDefault]) -> list[str]:
    """The one-line reasons the table answered instead of vLLM's selection, each once."""
    return [
        f"{reason}: {BY_TABLE} answers"
        for reason in dict.fromkeys(d.reason for d in defaults.values() if d.reason)
    ]


def default_backend(points: Sequence[ComparePoint], default: VllmDefault) -> str | None:
    """Of `default.backends`, the first timed at some point of `points` (one shape's)."""
    for name in default.backends:
        if any(p.latency(name) is not None for p in points):
            return name
    return None


def beats(ratio: float, other: str) -> str:
    """Words for `ratio` = other's time / tuned Triton's (above 1: Triton faster)."""
    if ratio > 1:
        return f"Triton beats {other} by {(ratio - 1) * 100:.1f}% ({other} takes {ratio:.3g}x)"
    if ratio < 1:
        return (
            f"{other} beats Triton by {(1 / ratio - 1) * 100:.1f}% (Triton takes {1 / ratio:.3g}x)"
        )
    return f"Triton and {other} tie"


def _ratios(
    points: Sequence[ComparePoint], chosen: Mapping[tuple[int, int], str]
) -> dict[int, list[float]]:
    """M -> (default's latency / tuned Triton's) over the shapes where both ran."""
    ratios: dict[int, list[float]] = {}
    for point in points:
        name = chosen.get((point.N, point.K))
        tuned = point.latency(TRITON_TUNED)
        other = point.latency(name) if name else None
        if tuned is not None and other is not None:
            ratios.setdefault(point.M, []).append(other / tuned)
    return dict(sorted(ratios.items()))


def _not_compared(defaults: Mapping[tuple[int, int], VllmDefault]) -> list[str]:
    kernels = sorted({d.kernel for d in defaults.values() if d.kernel})
    if not kernels:
        why = "no vLLM default kernel is timed on this backend"
    elif all(d.backends == (TRITON_TUNED,) for d in defaults.values()):
        return [
            f"vLLM's default here is its Triton kernel ({', '.join(kernels)}): it reads "
            "the tuned files without --linear-backend triton"
        ]
    else:
        why = f"here it is {', '.join(kernels)}, not timed here"
    return [
        f"vLLM's default kernel was not compared ({why}); the verdicts above compare the "
        "kernels that ran"
    ]


def flag_lines(
    points: Sequence[ComparePoint], defaults: Mapping[tuple[int, int], VllmDefault]
) -> list[str]:
    """Whether `--linear-backend triton` with the tuned files beats vLLM's default kernel:
    per M (geometric mean over shapes of default time / tuned Triton time), then decode
    (M <= DECODE_MAX_M) and prefill (M >= PREFILL_MIN_M) apart (geometric mean over their
    points). Lines for the terminal and the stored report.

    Args:
        points: every (shape, M) of a compare run.
        defaults: (N, K) -> vLLM's default there (`default_kernels`).
    """
    by_shape: dict[tuple[int, int], list[ComparePoint]] = {}
    for point in points:
        by_shape.setdefault((point.N, point.K), []).append(point)
    chosen = {
        shape: name
        for shape, shape_points in by_shape.items()
        if (name := default_backend(shape_points, defaults[shape])) not in (None, TRITON_TUNED)
    }
    ratios = _ratios(points, chosen)
    if not ratios:
        return _not_compared(defaults)
    names = sorted(set(chosen.values()))
    kernels = sorted({d.kernel for d in defaults.values() if d.kernel})
    source = sorted({d.source for d in defaults.values()})
    other = " / ".join(names)
    lines = [
        f"vLLM's default here: {', '.join(kernels)} (timed as {other}; from "
        f"{', '.join(source)}). --linear-backend triton with the tuned files vs it, per M "
        "(geometric mean over shapes):"
    ]
    lines += [f"  M={M}: {beats(geomean(values), other)}" for M, values in ratios.items()]
    for regime, keep in (
        (f"decode (M <= {DECODE_MAX_M})", lambda M: M <= DECODE_MAX_M),
        (f"prefill (M >= {PREFILL_MIN_M})", lambda M: M >= PREFILL_MIN_M),
    ):
        values = [v for M, vs in ratios.items() if keep(M) for v in vs]
        lines.append(
            f"--linear-backend triton, {regime}: "
            + (
                f"{beats(geomean(values), other)} over {len(values)} point(s)"
                if values
                else f"no point where Triton and {other} both ran"
            )
        )
    return lines
