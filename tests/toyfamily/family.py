"""The proof family: a kernel family that no product module names, with its own Triton kernel
(`tests.toyfamily.kernel`: a per-tensor-scaled FP8 GEMM), its own file names
(`toy,G=..,N=..,K=..,device_name=...json`, no block shape), its own key in a model's shapes
file (`toy = [[N, K, G], ...]`), one dimension G beyond N and K, an M-dependent default, and
its own engine folder, read first from the folder $TOY_CONFIG_FOLDER names. A test registers
it (monkeypatching `tuner.kernels.registry.FAMILIES`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import torch

from tests.toyfamily.kernel import scaled_gemm, scaled_gemm_kernel
from tuner.core import FP8_DTYPE
from tuner.kernels.config import KernelConfig
from tuner.kernels.engines import EngineFolder
from tuner.kernels.family import FamilyFiles, FamilyShapes, KernelFamily
from tuner.kernels.shape import Shape, int_rows
from tuner.kernels.target import compile_call

ENV = "TOY_CONFIG_FOLDER"
_NAME = re.compile(r"toy,G=(\d+),N=(\d+),K=(\d+),device_name=([A-Za-z0-9_]+)\.json")
SPACE = [KernelConfig(bm, bn, bk, 1, 4, 2) for bm in (16, 32) for bn in (32, 64) for bk in (32, 64)]


def toy_shape(N: int, K: int, G: int) -> Shape:
    """A toy shape: per-tensor scales (no block shape) and its dimension G."""
    return Shape(N, K, None, (("G", G),))


@dataclass(frozen=True)
class ToyWorkload:
    """A [M, K] and B [N, K] in FP8 drawn from `seed`, and one float32 scale each."""

    A: Any
    B: Any
    scales: Any

    @classmethod
    def make(cls, shape: Shape, M: int, *, seed: int, device: str) -> ToyWorkload:
        gen = torch.Generator().manual_seed(seed)
        A, B = (
            (torch.randn(rows, shape.K, generator=gen) * 64).to(torch.float8_e4m3fn).to(device)
            for rows in (M, shape.N)
        )
        scales = ((torch.rand(2, 1, generator=gen) + 0.5) / 64).to(device)
        return cls(A, B, scales)

    def weights(self) -> tuple[Any, ...]:
        return (self.B,)

    def reference(self, out_dtype: Any = None) -> Any:
        return (self.A.double() @ self.B.double().T) * float(self.scales.double().prod())

    def launch(self, config: KernelConfig, weights: tuple[Any, ...], *, out: Any, out_dtype: Any):
        return scaled_gemm(
            self.A, weights[0], *self.scales, config.as_dict(), out=out, out_dtype=out_dtype
        )


def _why_invalid(config: KernelConfig, shape: Shape) -> str | None:
    if config.BLOCK_SIZE_K > shape.K:
        return f"BLOCK_SIZE_K={config.BLOCK_SIZE_K} is more than K={shape.K}"
    return None


def _compile_for_target(config: KernelConfig, arch: int, *, shape: Shape, M: int, out_dtype):
    fp8 = torch.float8_e4m3fn
    A, B = (torch.empty(rows, shape.K, dtype=fp8, device="meta") for rows in (M, shape.N))
    C, scale = torch.empty(M, shape.N, dtype=out_dtype, device="meta"), torch.ones(1, device="meta")
    args = (A, B, C, scale, scale, M, shape.N, shape.K)
    return compile_call(scaled_gemm_kernel, arch, args, config.as_dict())


def _file_name(shape: Shape, device: str, engine: str) -> str:
    return f"toy,{shape.params_text},N={shape.N},K={shape.K},device_name={device}.json"


def _parse_file_name(name: str) -> tuple[Shape, str, str]:
    match = _NAME.fullmatch(name)
    if match is None:
        raise ValueError(f"{name!r} is not a toy file name")
    G, N, K, device = match.groups()
    return toy_shape(int(N), int(K), int(G)), device, FP8_DTYPE


def _parse_shapes(rows: object, where: str, block_shape: Any) -> tuple[Shape, ...]:
    """`toy = [[N, K, G], ...]`; the model's block shape is not the toy's: it has none."""
    names = ("N", "K", "G")
    not_a_list = "toy must be a list of [N, K, G]"
    rows = int_rows(rows, where, names=names, row_label="toy", not_a_list=not_a_list)
    return tuple(toy_shape(N, K, G) for N, K, G in rows)


TOY = KernelFamily(
    name="toy",
    title="a per-tensor-scaled FP8 GEMM (tests only)",
    kernel_module="tests.toyfamily.kernel",
    kernel_function="scaled_gemm_kernel",
    space=lambda: list(SPACE),
    why_invalid=_why_invalid,
    default_config=lambda shape, M: KernelConfig(16 if M <= 16 else 32, 64, 32, 1, 4, 2),
    files=FamilyFiles(
        file_name=_file_name,
        parse_file_name=_parse_file_name,
        engine_folders=(EngineFolder("vllm", "0", "toyengine/configs", env=ENV),),
    ),
    workload=ToyWorkload.make,
    compile_for_target=_compile_for_target,
    shapes=FamilyShapes(
        shapes_key="toy",
        shapes_row="[N, K, G]",
        parse_shapes=_parse_shapes,
        shape_row=lambda shape: (shape.N, shape.K, shape.param("G")),
        describe_shapes=lambda shapes: f"{len(shapes)} toy shape(s)",
    ),
)
