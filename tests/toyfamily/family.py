"""A third kernel family, known to no product module: the dense kernel under another name, its
own file names, an M-dependent default, one dimension G beyond N and K, its own key in a
model's shapes file (`toy = [[N, K, G], ...]`), and no block scales: its shapes carry
block_shape None, its file names no block shape, and its weight is quantized per tensor (one
scale for the whole weight [N, K], one activation scale per row of A), which the dense kernel
runs as a single scale block of (N, K): group_n = N, group_k = K. A test registers it
(monkeypatching `tuner.kernels.registry.FAMILIES`); nothing else names it."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.family import DENSE
from tuner.kernels.dense.space import why_invalid
from tuner.kernels.family import Workload
from tuner.kernels.shape import Shape
from tuner.kernels.shapes_rows import int_rows

_NAME = re.compile(r"toy3,G=(\d+),N=(\d+),K=(\d+),device_name=([A-Za-z0-9_]+)\.json")


def as_dense(shape: Shape) -> Shape:
    """The shape as the dense kernel runs it: per-tensor scales are one scale block (N, K)."""
    if shape.block_shape is not None:
        raise ValueError(f"toy3 shapes have no block shape, got {shape.block_shape}")
    return dataclasses.replace(shape, block_shape=(shape.N, shape.K), params=())


def _why_invalid(config: KernelConfig, shape: Shape) -> str | None:
    """The dense kernel's rules for the one scale block: BLOCK_SIZE_K must divide K."""
    return why_invalid(config, (shape.N, shape.K))


def _default(shape: Shape, M: int) -> KernelConfig:
    return KernelConfig(16 if M <= 16 else 64, 128, 128, 1, 4, 2)


def _workload(shape: Shape, M: int, *, seed: int, device: str) -> Workload:
    """The dense GEMM's tensors with per-tensor weight scales (Bs [1, 1], As [M, 1])."""
    return DENSE.workload(as_dense(shape), M, seed=seed, device=device)


def _compile_for_target(
    config: KernelConfig, arch: int, *, shape: Shape, M: int, out_dtype: Any
) -> Any:
    return DENSE.compile_for_target(config, arch, shape=as_dense(shape), M=M, out_dtype=out_dtype)


def _file_name(shape: Shape, device: str, engine: str) -> str:
    return f"toy3,{shape.params_text},N={shape.N},K={shape.K},device_name={device}.json"


def _parse_file_name(name: str) -> tuple[Shape, str, str]:
    match = _NAME.fullmatch(name)
    if match is None:
        raise ValueError(f"{name!r} is not a toy3 file name")
    G, N, K, device = match.groups()
    return Shape(int(N), int(K), None, (("G", int(G)),)), device, "fp8_w8a8"


def _parse_shapes(rows: object, where: str, block_shape: tuple[int, int]) -> tuple[Shape, ...]:
    """`toy = [[N, K, G], ...]`; the model's block shape is not the toy's: it has none."""
    return tuple(
        Shape(N, K, None, (("G", G),))
        for N, K, G in int_rows(
            rows,
            where,
            names=("N", "K", "G"),
            row_label="toy",
            not_a_list="toy must be a list of [N, K, G]",
        )
    )


def _describe(shapes: Sequence[Shape]) -> str:
    return f"{len(shapes)} toy shape(s)"


TOY3 = dataclasses.replace(
    DENSE,
    name="toy3",
    title="the dense kernel as a third family",
    why_invalid=_why_invalid,
    default_config=_default,
    workload=_workload,
    compile_for_target=_compile_for_target,
    specialization=lambda shape, M: DENSE.specialization(as_dense(shape), M),
    files=dataclasses.replace(
        DENSE.files,
        sglang_clamps_block_k=False,
        file_name=_file_name,
        parse_file_name=_parse_file_name,
        file_name_start="toy3,",
        respell_file_name=None,
    ),
    vllm=None,
    # Model shapes, planning and report: its own key, one sweep for all, generic labels.
    shapes=dataclasses.replace(
        DENSE.shapes,
        shapes_key="toy",
        shapes_row="[N, K, G]",
        parse_shapes=_parse_shapes,
        shape_row=lambda shape: (shape.N, shape.K, shape.param("G")),
        sweep_per_shape=False,
        sweep_key_has_family=True,  # the dense family's sweeps alone predate families
        describe_shapes=_describe,
    ),
    report=dataclasses.replace(
        DENSE.report,
        short_title="",
        brief_shape=None,
        label=None,
        anchor=None,
        roofline_gemm=None,
    ),
)
