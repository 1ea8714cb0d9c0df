"""How vLLM serves the dense block-FP8 linear layers, for `tuner doctor`
(`tuner.kernels.dense.family.DENSE`'s `VllmServing` hooks): vLLM's own choice of kernel per
weight shape, doctor's lines on it, and whether the builtin kernel compiles to vLLM's code.

Facts (vLLM 0.33.0): `vllm/model_executor/kernels/linear/__init__.py` (init_fp8_linear_kernel
hands block-FP8 layers, 1x128 dynamic activation groups and 128x128 static weight blocks, to
choose_scaled_mm_linear_kernel with `_POSSIBLE_FP8_BLOCK_KERNELS` and quantization
"fp8_block_w8a8"; the list is reordered by `_resolve_backend_kernels`, Humming ahead of Marlin
on sm90, before it is walked); vLLM reads dense files only from its package's
quantization/utils/configs/ (fp8_utils.py, get_w8a8_block_fp8_configs).
"""

from __future__ import annotations

from collections import Counter

from tuner.kernels.dense.family import DENSE
from tuner.kernels.serving import (
    DEFAULT_DENSE,
    OWN,
    TABLE,
    Answer,
    Asked,
    Diagnosis,
    ModelAsked,
    compared_line,
    not_compared,
)
from tuner.kernels.vllm_table import (
    FP8_BLOCK_KERNELS,
    TRITON_FLAG,
    TRITON_KERNEL,
    table_dense_kernel,
)


def _walk_order(linear, capability: int) -> list:
    """vLLM's block-FP8 kernels for the current platform in the order its selection tries
    them: after `_resolve_backend_kernels` (the Humming reordering, the linear backend) where
    this vLLM has it, else as listed."""
    from vllm.platforms import current_platform

    kernels = list(linear._POSSIBLE_FP8_BLOCK_KERNELS.get(current_platform._enum, []))
    resolve = getattr(linear, "_resolve_backend_kernels", None)
    if resolve is None:
        return kernels
    return list(
        resolve(kernels, "scaled-mm", quantization="fp8_block_w8a8", compute_capability=capability)
    )


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


def select(capability: int, model: ModelAsked) -> Answer:
    """vLLM's choice for each block-FP8 linear layer of `model`, as init_fp8_linear_kernel
    makes it (bf16 in and out, as served); a DeepSeek-V3 layer's when it lists none.

    Args:
        capability: the compute capability as vLLM's int, e.g. 90.
        model: the model asked about (`ModelAsked.dense`: its weights' (N, K)).

    Returns:
        The kernel chosen for most shapes, the kernels passed over before it, and the shapes
        for which another was chosen.
    """
    import torch
    from vllm.model_executor.kernels import linear

    from tuner.kernels.vllm_layers import block_fp8_layer_config

    chosen: dict[tuple[int, int], type] = {}  # vLLM's kernel classes
    configs = {}
    for N, K in model.dense or DEFAULT_DENSE:
        configs[(N, K)] = block_fp8_layer_config(N, K, torch.bfloat16)
        chosen[(N, K)] = linear.choose_scaled_mm_linear_kernel(
            configs[(N, K)],
            linear._POSSIBLE_FP8_BLOCK_KERNELS,
            capability,
            quantization="fp8_block_w8a8",
        )
    counts = Counter(chosen.values())
    main = max(counts, key=lambda kernel: counts[kernel])  # the first of the most common
    first = next(shape for shape, kernel in chosen.items() if kernel is main)
    others: dict[str, list[str]] = {}
    for (N, K), kernel in chosen.items():
        if kernel is not main:
            others.setdefault(getattr(kernel, "__name__", str(kernel)), []).append(f"N={N},K={K}")
    return Answer(
        main.__name__,
        _passed_over(linear, main, configs[first], capability),
        others="; ".join(f"{name} for {' and '.join(shapes)}" for name, shapes in others.items()),
    )


def _say_table_shapes(out: Diagnosis, capability: int, model: ModelAsked) -> None:
    """The table's dense kernel per shape of the model (`table_dense_kernel`), one line."""
    by_kernel: dict[str, list[str]] = {}
    for N, K in model.dense:
        name = table_dense_kernel(capability, N, K, "bfloat16", model.model_type)
        label = dict(FP8_BLOCK_KERNELS)[name].split(" (")[0] if name else "not known here"
        by_kernel.setdefault(label, []).append(f"N={N},K={K}")
    if by_kernel:
        out.lines.append(
            f"  {model.label}: "
            + "; ".join(
                f"{label} for {len(shapes)} of {len(model.dense)} shapes"
                + (f" ({', '.join(shapes)})" if len(shapes) < len(model.dense) else "")
                for label, shapes in by_kernel.items()
            )
            + f" ({TABLE})"
        )


def advise(out: Diagnosis, asked: Asked, answer: Answer) -> None:
    """The dense kernel vLLM runs, who said so, and whether it reads the dense files.

    Args:
        out: the diagnosis to add lines (and `helps`) to.
        asked: the architecture, its row of the tuner's table, the model, the flags.
        answer: vLLM's own selection code's answer (`select`), or Answer(None) with a reason.
    """
    say = out.lines.append
    kernel = answer.kernel
    folder = DENSE.serving.files_folder if DENSE.serving else ""
    if kernel is not None:
        label = dict(FP8_BLOCK_KERNELS).get(kernel, kernel)
        say(f"dense block-FP8 linear: vLLM runs {label} ({kernel}) by default ({OWN})")
        if answer.others:
            say(f"  other shapes: {answer.others}")
        if answer.detail:
            say(f"  passed over first: {answer.detail}")
    else:
        say(f"dense block-FP8 linear: by default vLLM runs {asked.table.default} ({TABLE})")
        if answer.reason:
            say(f"  {answer.reason}: {TABLE} answers")
    if kernel == TRITON_KERNEL or asked.linear_backend_triton:
        how = "by default" if kernel == TRITON_KERNEL else f"with {TRITON_FLAG}"
        say(f"  files read: yes, {how} (from {folder} in the image)")
        out.helps.append(DENSE.name)
    else:
        say(
            f"  files read: no; {TRITON_FLAG} makes vLLM run the Triton kernel that reads "
            f"them (mount them at {folder}); measure first: tuner compare"
        )
    if kernel is None and asked.model is not None:
        _say_table_shapes(out, asked.capability, asked.model)


def compare(out: Diagnosis, capability: int) -> None:
    """Compile the builtin dense kernel and vLLM's with vLLM's default config at M = 1 and
    M = 64 (two specializations) and say whether the code is the same.

    Args:
        out: the diagnosis to add the line to.
        capability: the architecture to compile for, e.g. 90.
    """
    from tuner.kernels.dense.fidelity import compile_dense_pair
    from tuner.kernels.dense.space import default_config
    from tuner.kernels.dense.vllm_workload import vllm_kernel

    head = f"builtin vs vLLM's dense kernel on sm{capability}"
    if DENSE.vllm is None:
        out.lines.append(f"{head}: not compared (the family names no vLLM kernel)")
        return
    try:
        theirs = vllm_kernel(DENSE.vllm.module, DENSE.vllm.function)
        pairs = [
            compile_dense_pair(theirs, default_config(), capability, M=M, N=4096, K=4096)
            for M in (1, 64)
        ]
    except Exception as exc:  # noqa: BLE001 - any import or compile failure is the finding
        out.lines.append(not_compared(head, exc))
        return
    out.lines.append(
        compared_line(head, pairs, "tune with --kernel vllm here", "at M=1, default config")
    )
