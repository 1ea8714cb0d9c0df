"""One dense block-FP8 GEMM problem on a device (the dense family's `Workload`): its inputs drawn
as vLLM's tuning script draws them, its float64 reference, a launch of the builtin kernel or of
the installed vLLM's, and the kernel compiled for a GPU target as a launch specializes it."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import torch
import triton
from triton.compiler import CompiledKernel

from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.family import VLLM_DENSE
from tuner.kernels.dense.kernel import w8a8_block_fp8_matmul, w8a8_block_fp8_matmul_kernel
from tuner.kernels.shape import Shape
from tuner.kernels.target import (
    DEFAULT_TORCH_DTYPE,
    captured,
    compile_call,
)

# Largest finite float8_e4m3fn value: torch.finfo(torch.float8_e4m3fn).max.
FP8_MAX = 448.0
# Scales are drawn uniform in [SCALE_LOW, SCALE_HIGH). See DenseWorkload.make for why.
SCALE_LOW = 1e-3
SCALE_HIGH = 4e-3


def dequantize(
    values: torch.Tensor, scales: torch.Tensor, group_shape: tuple[int, int]
) -> torch.Tensor:
    """[R, C] values times the scale of their group_shape block ([ceil(R / rows),
    ceil(C / cols)] scales; partial blocks at the ends use their block's), in float64."""
    rows, cols = values.shape
    expanded = scales.double().repeat_interleave(group_shape[0], dim=0)[:rows]
    return values.double() * expanded.repeat_interleave(group_shape[1], dim=1)[:, :cols]


@dataclass(frozen=True)
class DenseWorkload:
    """A [M, K] x B [N, K]^T with block scales: A and B float8_e4m3fn, As [M, ceil(K /
    group_k)] and Bs [ceil(N / group_n), ceil(K / group_k)] float32 (A and As may carry leading
    dims instead of M); [group_n, group_k] `block_shape`; `kernel`: a JITFunction with the
    builtin kernel's parameters to launch instead of it."""

    A: torch.Tensor
    B: torch.Tensor
    As: torch.Tensor
    Bs: torch.Tensor
    block_shape: tuple[int, int]
    kernel: Any = None

    @classmethod
    def make(cls, shape: Shape, M: int, *, seed: int, device: str) -> DenseWorkload:
        """Random inputs of (shape, M), the same on every device: drawn on the CPU from a
        generator seeded with `seed`, in the order A, B, As, Bs, then moved to `device`.

        A and B as vLLM 0.33.0's tuning script (benchmark_w8a8_block_fp8.py) draws them:
        uniform in [-448, 448], cast to e4m3. Scales uniform in [1e-3, 4e-3), not vLLM's
        [0, 0.01): each term is at most 448^2 * 4e-3^2 = 3.2, so for K up to 18432
        (DeepSeek-V3's largest) even the worst sum stays below fp16's largest finite value
        65,504, typical outputs sit far above its smallest normal, and no scale is near zero
        (no output row or block vanishes and hides an error).

        Raises:
            ValueError: the shape has no block shape (`Shape.block_pair`).
        """
        (N, K), (group_n, group_k) = (shape.N, shape.K), shape.block_pair("dense")
        generator = torch.Generator(device="cpu").manual_seed(seed)

        def fp8(rows: int, cols: int) -> torch.Tensor:
            values = (torch.rand(rows, cols, generator=generator) * 2 - 1) * FP8_MAX
            return values.clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)

        def scales(rows: int, cols: int) -> torch.Tensor:
            unit = torch.rand(rows, cols, generator=generator, dtype=torch.float32)
            return SCALE_LOW + unit * (SCALE_HIGH - SCALE_LOW)

        kg = math.ceil(K / group_k)
        A, B = fp8(M, K), fp8(N, K)
        As, Bs = scales(M, kg), scales(math.ceil(N / group_n), kg)
        A, B, As, Bs = (tensor.to(device) for tensor in (A, B, As, Bs))
        return cls(A, B, As, Bs, (group_n, group_k))

    def weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, Bs): what a launch reads that serving does not keep in L2."""
        return (self.B, self.Bs)

    def reference(self, out_dtype: torch.dtype | None = None) -> torch.Tensor:
        """What the GEMM approximates, [M, N] float64 (M = A.numel() // K; one launch has no
        intermediate to round): C[m, n] = sum_k A[m, k] * As[m, k // group_k] * B[n, k] *
        Bs[n // group_n, k // group_k]."""
        K = self.B.shape[1]
        rows = (self.A.reshape(-1, K), self.As.reshape(-1, self.As.shape[-1]))
        a = dequantize(*rows, (1, self.block_shape[1]))
        return a @ dequantize(self.B, self.Bs, self.block_shape).T

    def launch(self, config: KernelConfig, weights: tuple, *, out: Any, out_dtype: Any) -> Any:
        """One launch of `w8a8_block_fp8_matmul` (of `kernel` where given) reading the weight
        copy `weights` = (B, Bs)."""
        (B, Bs), meta = weights, config.as_dict()
        return w8a8_block_fp8_matmul(
            self.A, B, self.As, Bs, self.block_shape, meta, out_dtype, out, self.kernel
        )


def vllm_workload(shape: Shape, M: int, *, seed: int, device: str) -> DenseWorkload:
    """The builtin workload's inputs (same seed, same data) launched with the installed vLLM's
    `_w8a8_triton_block_scaled_mm` (`tuner.kernels.dense.family.VLLM_DENSE`), with the
    arguments vLLM 0.33.0's `w8a8_triton_block_scaled_mm` passes it, which are the builtin
    wrapper's (fp8_utils.py: a grid of cdiv(M, BLOCK_SIZE_M) * cdiv(N, BLOCK_SIZE_N) programs,
    A, B read transposed, C, As, Bs read transposed, then the six keys).

    Raises:
        ImportError, AttributeError: vLLM or its kernel cannot be imported.
    """
    base = DenseWorkload.make(shape, M, seed=seed, device=device)
    return dataclasses.replace(base, kernel=VLLM_DENSE.kernel())


def captured_launch(
    config: KernelConfig, M: int, shape: Shape, out_dtype: torch.dtype = DEFAULT_TORCH_DTYPE
) -> tuple[tuple, dict]:
    """(args, kwargs) `w8a8_block_fp8_matmul` passes its kernel for an M x N x K launch of
    `config` with `shape`'s block shape, captured on contiguous "meta" tensors: nothing runs.

    Raises:
        ValueError: bad config, block_shape or out_dtype.
    """
    (N, K), (group_n, group_k) = (shape.N, shape.K), shape.block_pair("dense")
    kg = triton.cdiv(K, group_k)
    A, B = (torch.empty(rows, K, dtype=torch.float8_e4m3fn, device="meta") for rows in (M, N))
    As, Bs = (torch.empty(rows, kg, device="meta") for rows in (M, triton.cdiv(N, group_n)))
    block_shape, meta = (group_n, group_k), config.as_dict()
    return captured(w8a8_block_fp8_matmul, A, B, As, Bs, block_shape, meta, out_dtype=out_dtype)


def compile_for_target(
    config: KernelConfig, arch: int, *, shape: Shape, M: int, out_dtype: Any
) -> CompiledKernel:
    """Compile the kernel for an NVIDIA architecture (89, 90, 100, 120) without a GPU, as a
    launch of `config` at M x N x K (`captured_launch`); the binary lands in Triton's cache
    under that launch's key. `.metadata.shared` is its shared memory in bytes.

    Raises:
        ValueError: bad config, block_shape, out_dtype or dimensions.
        RuntimeError: this module was imported under TRITON_INTERPRET=1.
        triton.CompilationError: the compiler rejected the kernel.
    """
    launch = captured_launch(config, M, shape, out_dtype)
    return compile_call(w8a8_block_fp8_matmul_kernel, arch, *launch)
