"""`tuner shapes list|show|from-log|from-config`: the packaged models, and shapes from how a model
is served.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from tuner.cli.errors import fail
from tuner.cli.output import console, plain

if TYPE_CHECKING:
    from tuner.kernels.family import KernelFamily
    from tuner.kernels.shape import Shape

SaveOpt = Annotated[
    str | None,
    typer.Option(
        "--save",
        metavar="NAME",
        help="Save the shapes as model NAME in your shapes "
        "folder ($TUNER_SHAPES_DIR, else ~/.config/blockfp8-tuner/shapes/), so that "
        "`tuner sweep --model NAME` finds them.",
    ),
]


def shapes_list() -> None:
    """Models with shapes (packaged, then your shapes folder), TP sizes and descriptions."""
    from tuner.inputs.shapes import ShapesFileError, known_models, load_shapes, tp_sizes

    table = Table("model", "TP sizes", "description")
    broken = []
    for name in known_models():
        try:
            sizes = tp_sizes(name)
            description = load_shapes(name, sizes[0]).description
        except ShapesFileError as exc:
            broken.append(str(exc))
            continue
        table.add_row(name, ", ".join(map(str, sizes)), description)
    console.print(table)
    if broken:
        raise fail(
            broken[0]
            if len(broken) == 1
            else f"{broken[0]} (and {len(broken) - 1} more malformed shapes file(s))"
        )


def shapes_show(
    model: Annotated[str, typer.Argument(help="Model key from `tuner shapes list`.")],
    tp: Annotated[int | None, typer.Option(help="Tensor-parallel size.")] = None,
) -> None:
    """The (N, K) of a model at one TP size, with their source."""
    from tuner.inputs.shapes import UnknownModelError, load_shapes

    try:
        entry = load_shapes(model, tp)
    except (UnknownModelError, ValueError) as exc:
        raise fail(str(exc).strip("'\"")) from None
    group_n, group_k = entry.block_shape
    console.print(
        f"{entry.model} TP {entry.tp}, block_shape [{group_n}, {group_k}]", soft_wrap=True
    )
    table = Table("N", "K")
    for n, k in entry.pairs():
        table.add_row(str(n), str(k))
    console.print(table)
    console.print(f"source: {entry.source}", soft_wrap=True, markup=False)


def _print_shapes(shapes: Sequence[tuple[int, int]], layers: Sequence[str] | None = None) -> None:
    table = Table("N", "K", *(["layer"] if layers else []))
    for index, (n, k) in enumerate(shapes):
        table.add_row(str(n), str(k), *([layers[index]] if layers else []))
    console.print(table)


def _print_moe(moe: Sequence[tuple[int, int, int, int]]) -> None:
    table = Table("E", "N", "K", "top_k", title="MoE experts (fused-MoE kernel)")
    for row in moe:
        table.add_row(*map(str, row))
    console.print(table)


def _expert_shapes(
    family: KernelFamily,
    rows: Sequence[tuple[int, int, int, int]],
    block_shape: tuple[int, int],
    where: str,
) -> list[Shape]:
    """The shapes of (E, N, K, top_k) rows as the experts' family reads them from a shapes
    file (`FamilyShapes.parse_shapes`); [] for no rows."""
    if not rows or family.shapes.parse_shapes is None:
        return []
    return list(family.shapes.parse_shapes([list(row) for row in rows], where, block_shape))


def _save(
    name: str,
    *,
    tp: int,
    pairs: Sequence[tuple[int, int]],
    block_shape: tuple[int, int],
    source: str,
    description: str,
    moe: Sequence[tuple[int, int, int, int]] = (),
    model_type: str | None = None,
) -> None:
    """Save the dense (N, K) `pairs` and fused-MoE `moe` rows (E, N, K, top_k) derived from a
    log or config.json as model `name` at TP `tp`."""
    from tuner.inputs.shapes import ShapesFileError, save_shapes
    from tuner.kernels.family import EXPERTS, LINEAR_LAYERS
    from tuner.kernels.registry import family_of_part
    from tuner.kernels.shape import Shape

    layers, experts = family_of_part(LINEAR_LAYERS), family_of_part(EXPERTS)
    try:
        groups = {
            layers.name: [Shape(n, k, block_shape) for n, k in pairs],
            experts.name: _expert_shapes(experts, moe, block_shape, source),
        }
        path = save_shapes(
            name,
            tp=tp,
            groups=groups,
            block_shape=block_shape,
            source=source,
            description=description,
            model_type=model_type,
        )
    except (ShapesFileError, ValueError) as exc:
        raise fail(str(exc)) from None
    except OSError as exc:
        raise fail(f"cannot write the shapes file: {exc.strerror or exc}") from None
    console.print(
        f"saved as model '{name}', TP {tp}: {path}", soft_wrap=True, markup=False, highlight=False
    )


def _next_step(
    device_names: Sequence[str], model: str, tp: int | None, sglang: bool = False
) -> None:
    tp_text = f" --tp {tp}" if tp is not None else " --tp <TP>"
    for device_name in device_names or ["<device>"]:
        console.print(
            f"tuner sweep --device {device_name} --model {model}{tp_text}",
            soft_wrap=True,
            markup=False,
            highlight=False,
        )
        if sglang:
            console.print(
                f"tuner export --device {device_name} --out configs/ --engine sglang",
                soft_wrap=True,
                markup=False,
                highlight=False,
            )


def _print_other_families(scan) -> None:
    """Each other family's part of a log (`KernelFamily.log_line`): its shapes without a config
    file, where vLLM looks for them, and its files out of scope."""
    from tuner.files.engine_folders import family_rows
    from tuner.kernels.registry import DEFAULT_FAMILY, FAMILIES
    from tuner.kernels.shape import block_shape_text

    for family in FAMILIES.values():
        line = family.log_line
        if family.name == DEFAULT_FAMILY or line is None:
            continue
        shapes = scan.shapes_of(family.name)
        if shapes:
            console.print(f"{len(shapes)} {line.what} without a config file:", highlight=False)
            table = Table(*line.key_names, "block_shape")
            for shape in shapes:
                table.add_row(
                    *map(str, family.files.file_key(shape)), block_shape_text(shape.block_shape)
                )
            console.print(table)
            missing = scan.files.get(family.name, ())
            for folder in sorted({m.path.rsplit("/", 1)[0] for m in missing if "/" in m.path}):
                rows = family_rows("vllm", family.name)  # the newest release's row
                env = rows[-1].env if rows else None
                first = f"${env}, then " if env else ""
                plain(f"vLLM looks for them in {first}{folder}/")
        for name in scan.out_of_scope.get(family.name, ()):
            plain(f"out of scope: {name} ({line.out_of_scope_why})")


def from_log(
    log: Annotated[Path, typer.Argument(help="A vLLM or SGLang server log (plain or .gz).")],
    tp: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=1024,
            help="Tensor-parallel size the log was served with [default: read from the log].",
        ),
    ] = None,
    save: SaveOpt = None,
) -> None:
    """Shapes whose block-FP8 config file the engine did not find, from its log.

    Reads every "Using default W8A8 Block FP8 kernel config ... Config file not found at <path>"
    warning (vLLM's and SGLang's), and prints the device_name, the distinct (N, K, block_shape)
    and the `tuner sweep` command that covers them. vLLM's "Using default MoE config ..."
    warnings give the fused-MoE experts' (E, N) of block-FP8 files; other MoE files (per-tensor
    FP8, BF16) are reported as out of scope. A log states no MoE K or top_k: `--save` keeps the
    dense shapes only (use `from-config` for the experts).
    """
    from tuner.inputs.logs import log_shapes, next_step, read_log

    try:
        scan = read_log(log)
    except ValueError as exc:
        raise fail(str(exc)) from None
    if not scan.any_missing:
        if scan.kernel_line is not None:
            console.print(scan.kernel_line, soft_wrap=True, markup=False, highlight=False)
        _print_other_families(scan)
        raise fail(
            f"{log}: no 'Config file not found' warning of the W8A8 block-FP8 kernel in "
            f"{scan.lines} lines: every shape had a file, the Triton kernel did not run, "
            "or this is not a vLLM/SGLang server log",
            1,
        )
    found = log_shapes(scan, tp)
    _print_log_shapes(scan, found, log)
    if save is not None:
        _save_log_shapes(scan, found, log, save)
        return
    step = next_step(scan, found, log)
    for line in step.lines:
        console.print(line, soft_wrap=True, markup=False, highlight=False)
    if step.model is not None:
        _next_step(scan.device_names, step.model, step.tp, step.sglang)


def _print_log_shapes(scan, found, log: Path) -> None:
    """The log's warnings, device, model and TP; its dense shapes and the folders the engine
    searched; its MoE experts."""
    console.print(
        f"{log}: {scan.warnings} warning(s) from {', '.join(found.engines)}; device_name "
        f"{', '.join(scan.device_names)}; model {scan.model or 'not stated'}; "
        f"TP {found.tp if found.tp is not None else 'not stated'}",
        soft_wrap=True,
        markup=False,
        highlight=False,
    )
    if scan.kernel_line is not None:
        console.print(scan.kernel_line, soft_wrap=True, markup=False, highlight=False)
    if found.pairs:
        console.print(
            f"{len(found.pairs)} shape(s) without a config file, block_shape "
            f"{' and '.join(f'[{b[0]}, {b[1]}]' for b in found.block_shapes)}:",
            soft_wrap=True,
            highlight=False,
        )
        _print_shapes(found.pairs)
    for folder in sorted({m.folder for m in scan.missing if m.folder}):
        console.print(
            f"the engine looks for them in {folder}/", soft_wrap=True, markup=False, highlight=False
        )
    _print_other_families(scan)


def _save_log_shapes(scan, found, log: Path, save: str) -> None:
    """`from-log --save NAME`: the dense shapes saved as model NAME, then the next step."""
    from tuner.inputs.logs import save_problem

    problem = save_problem(found, save)
    if problem is not None:
        raise fail(problem)
    _save(
        save,
        tp=found.tp,
        pairs=found.pairs,
        block_shape=found.block_shapes[0],
        source=f"'Config file not found' warnings in {log.name}",
        description=f"{scan.model or save}: shapes read from a server log",
    )
    if found.experts:
        console.print(
            "the MoE experts are not saved (a log has no K or top_k): add them with "
            f"tuner shapes from-config config.json --tp {found.tp} --save {save}",
            soft_wrap=True,
            markup=False,
            highlight=False,
        )
    console.print("next:", highlight=False)
    _next_step(scan.device_names, save, found.tp, found.sglang)


def from_config(
    config: Annotated[Path, typer.Argument(help="The model's Hugging Face config.json.")],
    tp: Annotated[int, typer.Option(min=1, max=1024, help="Tensor-parallel size.")],
    save: SaveOpt = None,
) -> None:
    """The block-FP8 GEMM shapes of a decoder at one TP size: dense layers and MoE experts.

    qkv_proj N = (heads/tp + 2 * max(1, kv_heads/tp)) * head_dim, K = hidden; o_proj N = hidden,
    K = heads * head_dim / tp; gate_up_proj N = 2 * intermediate / tp, K = hidden; down_proj
    N = hidden, K = intermediate / tp (vLLM's QKV/MergedColumn/RowParallelLinear). Llama,
    Mistral, Qwen2, Qwen3 and Qwen3-MoE architectures. MoE experts: E = num_experts (or
    num_local_experts, n_routed_experts), N = moe_intermediate_size / tp, K = hidden, top_k =
    num_experts_per_tok (other MoE architectures: experts only). Splits that do not divide and
    checkpoints that are not block FP8 (BF16, per-tensor/channel/group FP8) are refused.
    """
    from tuner.inputs.hfconfig import derive_shapes, read_config

    try:
        derived = derive_shapes(read_config(config), tp, where=str(config))
    except ValueError as exc:
        raise fail(str(exc)) from None
    bn, bk = derived.block_shape
    console.print(
        f"{config}: {derived.architecture}"
        f"{f' ({derived.model})' if derived.model else ''}, TP {tp}, "
        f"block_shape [{bn}, {bk}]",
        soft_wrap=True,
        markup=False,
        highlight=False,
    )
    if derived.layers:
        _print_shapes(
            [(layer.N, layer.K) for layer in derived.layers],
            [layer.layer for layer in derived.layers],
        )
    else:
        console.print(
            f"dense layers of {derived.architecture} are not derived; MoE experts only",
            soft_wrap=True,
            markup=False,
            highlight=False,
        )
    moe = [(m.E, m.N, m.K, m.top_k) for m in derived.moe]
    if moe:
        _print_moe(moe)
    if save is None:
        console.print(
            f"save them with --save NAME, then: tuner sweep --device <device> "
            f"--model NAME --tp {tp}",
            soft_wrap=True,
            markup=False,
            highlight=False,
        )
        return
    _save(
        save,
        tp=tp,
        pairs=derived.shapes,
        block_shape=derived.block_shape,
        source=f"{config.name} ({derived.architecture}), derived by tuner.inputs.hfconfig's rule",
        description=f"{derived.model or save}: "
        f"{'dense layers and MoE experts' if moe else 'dense layers'} derived from config.json",
        moe=moe,
        model_type=derived.model_type,
    )
    console.print("next:", highlight=False)
    _next_step([], save, tp)
