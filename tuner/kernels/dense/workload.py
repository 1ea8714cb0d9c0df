"""One dense block-FP8 GEMM problem on a device: its tensors, its float64 reference and one
launch (the `tuner.kernels.family.Workload` of the dense family)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.kernel import w8a8_block_fp8_matmul
from tuner.kernels.dense.reference import BlockFp8Inputs, make_inputs, reference_matmul
from tuner.kernels.shape import Shape


@dataclass(frozen=True)
class DenseWorkload:
    """A [M, K] x B [N, K]^T with block scales, as `make_inputs` draws them.

    Attributes:
        inputs: A [M, K], B [N, K] (float8_e4m3fn), As [M, ceil(K/group_k)],
            Bs [ceil(N/group_n), ceil(K/group_k)] (float32).
        block_shape: [group_n, group_k] of the weight scales.
    """

    inputs: BlockFp8Inputs
    block_shape: tuple[int, int]

    @classmethod
    def make(cls, shape: Shape, M: int, *, seed: int, device: str) -> DenseWorkload:
        """Draw the inputs of (shape, M) with `seed` on `device` ("cuda" or "cpu").

        Raises:
            ValueError: the shape has no block shape (`Shape.block_pair`).
        """
        block_shape = shape.block_pair("dense")
        inputs = make_inputs(M, shape.N, shape.K, block_shape, seed=seed, device=device)
        return cls(inputs, block_shape)

    @property
    def out_shape(self) -> tuple[int, int]:
        """[M, N] of the output C."""
        return (self.inputs.A.shape[0], self.inputs.B.shape[0])

    def weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, Bs): what a launch reads that serving does not keep in L2."""
        return (self.inputs.B, self.inputs.Bs)

    def reference(self, out_dtype: torch.dtype | None = None) -> torch.Tensor:
        """[M, N] float64: dequantize, then multiply (`reference_matmul`); one launch has no
        intermediate, so out_dtype changes nothing."""
        return reference_matmul(self.inputs, self.block_shape)

    def launch(
        self,
        config: KernelConfig,
        weights: tuple[torch.Tensor, torch.Tensor],
        *,
        out: torch.Tensor | None,
        out_dtype: torch.dtype,
    ) -> torch.Tensor:
        """One launch of `w8a8_block_fp8_matmul` reading the weight copy `weights` = (B, Bs)."""
        B, Bs = weights
        return w8a8_block_fp8_matmul(
            self.inputs.A,
            B,
            self.inputs.As,
            Bs,
            self.block_shape,
            config.as_dict(),
            out_dtype=out_dtype,
            out=out,
        )
