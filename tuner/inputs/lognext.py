"""What `tuner shapes from-log` makes of a scanned server log: the shapes it asks for, whether
they can be saved, and the next step (a known model that covers them, or a name to save)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from tuner.inputs.logs import LogScan
from tuner.inputs.modelkeys import find_covering, free_model_key, suggest_model_key
from tuner.kernels.family import EXPERTS
from tuner.kernels.registry import family_of_part


@dataclass(frozen=True)
class LogShapes:
    """The shapes a log's warnings ask for.

    Attributes:
        tp: tensor-parallel size (`--tp`, else the log's); None when neither states it.
        pairs: (N, K) of the dense GEMMs without a config file (weights [N, K]).
        experts: (E, N, block_shape) of the fused-MoE experts without a config file.
        block_shapes: the distinct [group_n, group_k] of both, ascending.
        engines: "sglang" and/or "vllm", whose warnings these are.
    """

    tp: int | None
    pairs: list[tuple[int, int]]
    experts: list[tuple[int, int, tuple[int, int]]]
    block_shapes: list[tuple[int, int]]
    engines: list[str]

    @property
    def sglang(self) -> bool:
        """SGLang's warnings are among them (its files are exported too)."""
        return "sglang" in self.engines


def log_shapes(scan: LogScan, tp: int | None) -> LogShapes:
    """The shapes of `scan` (`tuner.inputs.logs.read_log`), at `tp` or else the log's TP."""

    experts_family = family_of_part(EXPERTS)
    shapes = scan.shapes()
    experts: list[tuple[int, int, tuple[int, int]]] = []
    for shape in scan.shapes_of(experts_family.name):
        E, N = experts_family.files.file_key(shape)  # what a log's file name names of an expert
        experts.append((E, N, shape.block_pair(experts_family.name)))
    return LogShapes(
        tp=tp if tp is not None else scan.tp,
        pairs=[(n, k) for n, k, _ in shapes],
        experts=experts,
        block_shapes=sorted({b for _, _, b in shapes} | {b for _, _, b in experts}),
        engines=sorted({m.engine for files in scan.files.values() for m in files}),
    )


def save_problem(found: LogShapes, save: str) -> str | None:
    """Why `--save NAME` cannot save these shapes (one line), or None when it can."""
    if found.tp is None:
        return "the log does not state the tensor-parallel size: pass --tp with --save"
    if len(found.block_shapes) != 1:
        return "the log has shapes of several block_shapes; a shapes entry has one"
    if not found.pairs:
        return (
            "the log names the MoE experts' E and N but not their K (hidden size) or "
            f"top_k: save them with `tuner shapes from-config config.json --tp {found.tp} "
            f"--save {save}`"
        )
    return None


@dataclass(frozen=True)
class NextStep:
    """Lines to print, then (when `model` is set) the `tuner sweep` commands of `model` at `tp`
    (`--engine sglang` export too when `sglang`)."""

    lines: tuple[str, ...]
    model: str | None = None
    tp: int | None = None
    sglang: bool = False


def _moe_step(found: LogShapes) -> NextStep:
    """The MoE experts' lines; a next step when a known model covers them and no dense shapes
    are left, else only lines (`model` None)."""
    covering = (
        find_covering([], found.block_shapes[0], found.tp, [(e, n) for e, n, _ in found.experts])
        if len(found.block_shapes) == 1
        else []
    )
    if covering:
        model, size = covering[0]
        if not found.pairs:
            return NextStep(
                (f"these are MoE experts of model '{model}' TP {size}; next:",), model, size
            )
        return NextStep((f"the MoE experts are those of model '{model}' TP {size}",))
    return NextStep(
        (
            "no known model lists these MoE experts; derive them (E, N, K, top_k) with: "
            f"tuner shapes from-config config.json --tp {found.tp or '<TP>'} "
            "--save NAME",
        )
    )


def next_step(scan: LogScan, found: LogShapes, log: Path) -> NextStep:
    """Without `--save`: the known model whose shapes cover the log's (`find_covering`), or the
    command that saves them under a free name first.

    Args:
        scan: the log's scan.
        found: `log_shapes(scan, tp)`.
        log: the log's path, as the user gave it (it goes into the suggested command).
    """
    lines: tuple[str, ...] = ()
    if found.experts:
        moe = _moe_step(found)
        if moe.model is not None or not found.pairs:
            return moe
        lines = moe.lines
    covering = (
        find_covering(found.pairs, found.block_shapes[0], found.tp)
        if len(found.block_shapes) == 1
        else []
    )
    if covering:
        model, size = covering[0]
        return NextStep(
            (*lines, f"these are shapes of model '{model}' TP {size}; next:"),
            model,
            size,
            found.sglang,
        )
    # A name `--save` accepts: not a packaged model's, nor one saved before (whose shapes
    # differ, or find_covering would have named it).
    name = free_model_key(suggest_model_key(scan.model or log.stem))
    tp_flag = "" if found.tp is not None and found.tp == scan.tp else f" --tp {found.tp or '<TP>'}"
    return NextStep(
        (
            *lines,
            f"save them first (tuner shapes from-log {shlex.quote(str(log))} "
            f"--save {name}{tp_flag}), then:",
        ),
        name,
        found.tp,
        found.sglang,
    )
