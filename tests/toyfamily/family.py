"""A third kernel family, known to no product module: the dense kernel under another name, its
own file names, an M-dependent default, one dimension G beyond N and K, and its own key in a
model's shapes file (`toy = [[N, K, G], ...]`). A test registers it (monkeypatching
`tuner.kernels.registry.FAMILIES`); nothing else names it."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.family import DENSE
from tuner.kernels.family import Shape
from tuner.kernels.shapes_rows import int_rows

_NAME = re.compile(r"toy3,G=(\d+),N=(\d+),K=(\d+),device_name=([A-Za-z0-9_]+)\.json")


def _default(shape: Shape, M: int) -> KernelConfig:
    return KernelConfig(16 if M <= 16 else 64, 128, 128, 1, 4, 2)


def _file_name(shape: Shape, device: str, engine: str) -> str:
    return f"toy3,{shape.params_text},N={shape.N},K={shape.K},device_name={device}.json"


def _parse_file_name(name: str) -> tuple[Shape, str, str]:
    match = _NAME.fullmatch(name)
    if match is None:
        raise ValueError(f"{name!r} is not a toy3 file name")
    G, N, K, device = match.groups()
    return Shape(int(N), int(K), (128, 128), (("G", int(G)),)), device, "fp8_w8a8"


def _parse_shapes(rows: object, where: str, block_shape: tuple[int, int]) -> tuple[Shape, ...]:
    return tuple(
        Shape(N, K, block_shape, (("G", G),))
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
    default_config=_default,
    file_name=_file_name,
    parse_file_name=_parse_file_name,
    file_name_start="toy3,",
    respell_file_name=None,
    vllm=None,
    # Model shapes, planning and report: its own key, one sweep for all, generic labels.
    short_title="",
    shapes_key="toy",
    shapes_row="[N, K, G]",
    parse_shapes=_parse_shapes,
    shape_row=lambda shape: (shape.N, shape.K, shape.param("G")),
    sweep_per_shape=False,
    sweep_key_has_family=True,  # the dense family's sweeps alone predate families
    describe_shapes=_describe,
    brief_shape=None,
    label=None,
    anchor=None,
    roofline_gemm=None,
)
