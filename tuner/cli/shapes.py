"""`tuner shapes list|show|from-log|from-config`: the packaged models, and shapes from how a model
is served."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from tuner.cli.errors import fail
from tuner.cli.options import TpOpt
from tuner.cli.output import console, plain
from tuner.inputs.hfconfig import DerivedShapes, derive_shapes, read_config
from tuner.inputs.logs import LogScan, read_log
from tuner.inputs.shapes import (
    ShapesFileError,
    UnknownModelError,
    known_models,
    load_shapes,
    save_shapes,
    tp_sizes,
)
from tuner.kernels.family import EXPERTS, LINEAR_LAYERS
from tuner.kernels.registry import FAMILIES, family_of_part, get_family
from tuner.kernels.shape import Shape, block_shape_text

SaveOpt = Annotated[
    str | None,
    typer.Option(
        "--save",
        metavar="NAME",
        help="Save the shapes as model NAME in your shapes folder ($TUNER_SHAPES_DIR, else "
        "~/.config/blockfp8-tuner/shapes/), so that `tuner sweep --model NAME` finds them.",
    ),
]
ModelArg = Annotated[str, typer.Argument(help="Model key from `tuner shapes list`.")]


def _table(header: Sequence[str], rows, title: str | None = None) -> None:
    table = Table(*header, title=title)
    for row in rows:
        table.add_row(*map(str, row))
    console.print(table)


def shapes_list() -> None:
    """Models with shapes (packaged, then your shapes folder), TP sizes and descriptions."""
    rows, broken = [], []
    for name in known_models():
        try:
            sizes = tp_sizes(name)
            rows.append((name, ", ".join(map(str, sizes)), load_shapes(name, sizes[0]).description))
        except ShapesFileError as exc:
            broken.append(str(exc))
    _table(("model", "TP sizes", "description"), rows)
    if broken:
        raise fail(broken[0])


def shapes_show(model: ModelArg, tp: TpOpt = None) -> None:
    """The (N, K) of a model at one TP size, with their source."""
    try:
        entry = load_shapes(model, tp)
    except (UnknownModelError, ValueError) as exc:
        raise fail(str(exc)) from None
    plain(f"{entry.model} TP {entry.tp}, block_shape {block_shape_text(entry.block_shape)}")
    _table(("N", "K"), entry.pairs())
    plain(f"source: {entry.source}")


def _save(
    name: str, *, tp: int, groups: dict, block_shape: tuple[int, int], source: str, **about
) -> None:
    """Save each family's rows in `groups` (family name -> its shapes-file rows, e.g. (N, K) or
    (E, N, K, top_k), parsed by the family) as model `name` at TP `tp`
    (`tuner.inputs.shapes.save_shapes`, which `about` goes to)."""
    try:
        parsed = {
            family: get_family(family).shapes.parse_shapes(
                [list(r) for r in rows], source, block_shape
            )  # type: ignore[misc]
            for family, rows in groups.items()
            if rows
        }
        path = save_shapes(
            name, tp=tp, groups=parsed, block_shape=block_shape, source=source, **about
        )
    except ValueError as exc:  # ShapesFileError among them
        raise fail(str(exc)) from None
    except OSError as exc:
        raise fail(f"cannot write the shapes file: {exc.strerror or exc}") from None
    plain(f"saved as model '{name}', TP {tp}: {path}")


def _print_log(log: Path, scan: LogScan, tp: int | None) -> None:
    """A log's missing files (`tuner.inputs.logs.read_log`): a line on the log, whether the
    server reads the tuned files, and each family's shapes without a config file."""
    if scan.device_names:
        plain(
            f"{log}: {scan.warnings} warning(s); device_name {', '.join(scan.device_names)}; "
            f"model {scan.model or 'not stated'}; TP {tp if tp is not None else 'not stated'}"
        )
    if scan.kernel_line is not None:
        plain(scan.kernel_line)
    for family in FAMILIES.values():
        shapes = scan.shapes_of(family.name)
        if shapes and family.log_line is not None:
            blocks = " and ".join(sorted({block_shape_text(s.block_shape) for s in shapes}))
            plain(
                f"{len(shapes)} {family.log_line.what} without a config file, block_shape {blocks}:"
            )
            _table(family.log_line.key_names, [family.files.file_key(s) for s in shapes])


def from_log(
    log: Annotated[Path, typer.Argument(help="A vLLM or SGLang server log (plain or .gz).")],
    tp: TpOpt = None,
    save: SaveOpt = None,
) -> None:
    """Shapes whose block-FP8 config file the engine did not find, from its log.

    Reads every "Using default W8A8 Block FP8 kernel config ... Config file not found at <path>"
    warning (vLLM's and SGLang's) and prints the device_name and the distinct (N, K,
    block_shape), at the TP size the log states unless --tp is given; vLLM's "Using default
    MoE config ..." warnings give the fused-MoE experts' (E, N) of block-FP8 files. A log
    states no MoE K or top_k: `--save` keeps the dense shapes only (use `from-config` for the
    experts).
    """
    try:
        scan = read_log(log)
    except ValueError as exc:
        raise fail(str(exc)) from None
    tp = tp if tp is not None else scan.tp
    found = {name: shapes for name in scan.files if (shapes := scan.shapes_of(name))}
    _print_log(log, scan, tp)
    if not found:
        raise fail(
            f"{log}: no 'Config file not found' warning of the W8A8 block-FP8 kernel: every "
            "shape had a file, the Triton kernel did not run, or it is no vLLM/SGLang log",
            1,
        )
    if save is not None:
        _save_log(log, scan, found, tp, save)


def _save_log(
    log: Path, scan: LogScan, found: dict[str, list[Shape]], tp: int | None, save: str
) -> None:
    """`from-log --save NAME`: the shapes a log names whole saved as model NAME; a family whose
    file names hold only part of its shapes-file rows (fused-MoE experts: E and N) is not."""
    if tp is None:
        raise fail("the log does not state the tensor-parallel size: pass --tp with --save")
    whole, partial = {}, []
    for name, shapes in found.items():
        kind = get_family(name)
        assert kind.log_line is not None  # a log names files of the families with a log line
        names = ", ".join(kind.log_line.key_names)
        if kind.shapes.shapes_row == f"[{names}]":
            whole[name] = [kind.files.file_key(s) for s in shapes]
        else:
            partial.append(
                f"the log names {kind.log_line.what} by {names} only: derive their rows "
                f"{kind.shapes.shapes_row} with `tuner shapes from-config config.json --tp {tp}`"
            )
    blocks = {s.block_pair(name) for name in whole for s in found[name]}
    if not whole:
        raise fail(partial[0])
    if len(blocks) != 1:
        raise fail("the log has shapes of several block_shapes; a shapes entry has one")
    _save(
        save,
        tp=tp,
        groups=whole,
        block_shape=blocks.pop(),
        source=f"'Config file not found' warnings in {log.name}",
        description=f"{scan.model or save}: shapes read from a server log",
    )
    for line in partial:
        plain(f"not saved: {line}")


def _print_derived(config: Path, derived: DerivedShapes, tp: int) -> None:
    """Print what `from_config` derived (`tuner.inputs.hfconfig.derive_shapes`): a line on the
    model, its dense layers' (N, K) and its MoE experts' (E, N, K, top_k)."""
    model = f" ({derived.model})" if derived.model else ""
    plain(
        f"{config}: {derived.architecture}{model}, TP {tp}, "
        f"block_shape {block_shape_text(derived.block_shape)}"
    )
    if derived.layers:
        _table(("N", "K", "layer"), derived.layers)
    else:
        plain(f"dense layers of {derived.architecture} are not derived; MoE experts only")
    if derived.moe:
        _table(("E", "N", "K", "top_k"), derived.moe, title="MoE experts (fused-MoE kernel)")


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
    try:
        derived = derive_shapes(read_config(config), tp, where=str(config))
    except ValueError as exc:
        raise fail(str(exc)) from None
    _print_derived(config, derived, tp)
    if save is None:
        return
    parts = "dense layers and MoE experts" if derived.moe else "dense layers"
    _save(
        save,
        tp=tp,
        groups={
            family_of_part(LINEAR_LAYERS).name: derived.shapes,
            family_of_part(EXPERTS).name: derived.moe,
        },
        block_shape=derived.block_shape,
        source=f"{config.name} ({derived.architecture}), derived by tuner.inputs.hfconfig's rule",
        description=f"{derived.model or save}: {parts} derived from config.json",
        model_type=derived.model_type,
    )
