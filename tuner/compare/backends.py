"""The kernels `tuner compare` times against each other on one problem: our Triton kernel with a
config (tuned or vLLM's default), torch's block-scaled FP8 matmul, and vLLM's own ops when vLLM
is importable. One runner checks each against the float64 reference and times them all with
the same method as a trial (`tuner.measure.runner.KernelRunner`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tuner.compare.kernel_names import (  # noqa: F401 - re-exported, the names' old home
    BACKENDS,
    TORCH_CPU,
    TORCH_SCALED_MM,
    TRITON_DEFAULT,
    TRITON_TUNED,
    VLLM_CUTLASS,
    VLLM_DEEPGEMM,
    VLLM_HUMMING,
    VLLM_MARLIN,
)
from tuner.compare.vllm_linear import layer_kernels
from tuner.kernels.config import KernelConfig
from tuner.measure.runner import KernelRunner, Problem

# A library kernel: (A [M, K] fp8, As [M, ceil(K/group_k)] fp32, B [N, K] fp8,
# Bs [ceil(N/group_n), ceil(K/group_k)] fp32, out dtype, block_shape [group_n, group_k])
# -> C [M, N].
LibraryKernel = Callable[..., object]


@dataclass(frozen=True)
class Candidate:
    """One kernel to time: a Triton config, or a library kernel by backend name.

    Attributes:
        backend: one of BACKENDS.
        config: the Triton config; None for a library kernel.
    """

    backend: str
    config: KernelConfig | None = None


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"[:200]


def _torch_scaled_mm() -> LibraryKernel:
    """`torch.nn.functional.scaled_mm` with BlockWise1x128 scales for A and BlockWise128x128
    for B (torch 2.13). Which memory layout of the scales a build accepts differs by build and
    GPU, so the first call tries the layouts in turn and keeps the first that runs; the
    caller's check against the float64 reference decides whether its result counts."""
    import torch
    import torch.nn.functional as F

    recipe_a, recipe_b = F.ScalingType.BlockWise1x128, F.ScalingType.BlockWise128x128

    def outer(scale):  # the same values, stored with the first dimension fastest
        return scale.t().contiguous().t()

    layouts = [
        lambda As, Bs: (outer(As), Bs),
        lambda As, Bs: (outer(As), Bs.t()),
        lambda As, Bs: (As, Bs),
        lambda As, Bs: (As, Bs.t()),
        lambda As, Bs: (outer(As), outer(Bs)),
    ]
    chosen: list[Callable] = []

    def run(A, As, B, Bs, out_dtype, block_shape):
        if chosen:
            scale_a, scale_b = chosen[0](As, Bs)
            return F.scaled_mm(
                A, B.t(), scale_a, recipe_a, scale_b, recipe_b, output_dtype=out_dtype
            )
        errors = []
        for layout in layouts:
            scale_a, scale_b = layout(As, Bs)
            try:
                result = F.scaled_mm(
                    A, B.t(), scale_a, recipe_a, scale_b, recipe_b, output_dtype=out_dtype
                )
            except (RuntimeError, ValueError, NotImplementedError) as exc:
                errors.append(exc)
                continue
            chosen.append(layout)
            return result
        raise RuntimeError(
            f"torch {torch.__version__} runs no block-wise scale layout here: "
            f"{_one_line(errors[0])}"
        )

    return run


def _torch_cpu_dequant(A, As, B, Bs, out_dtype, block_shape):
    """A CPU stand-in for torch: dequantize both operands blockwise to float32 and multiply.
    Not a vLLM backend; on CPU it gives the interpreter's Triton timings a torch neighbour."""
    import torch

    group_n, group_k = block_shape
    a = A.float() * As.repeat_interleave(group_k, dim=1)[:, : A.shape[1]]
    b_scale = Bs.repeat_interleave(group_n, dim=0).repeat_interleave(group_k, dim=1)
    b = B.float() * b_scale[: B.shape[0], : B.shape[1]]
    return torch.matmul(a, b.t()).to(out_dtype)


def _vllm_kernels() -> tuple[dict[str, LibraryKernel], dict[str, str]]:
    """vLLM's block-FP8 ops, when vLLM is importable here (its CUDA build, on a GPU)."""
    try:
        from vllm import _custom_ops as ops
    except Exception as exc:  # noqa: BLE001 - any import failure means "not here"
        reason = f"vLLM not importable here ({_one_line(exc)})"
        return {}, {VLLM_DEEPGEMM: reason, VLLM_CUTLASS: reason, VLLM_MARLIN: reason}
    kernels: dict[str, LibraryKernel] = {}
    unavailable: dict[str, str] = {}

    # vLLM's fp8_utils.cutlass_scaled_mm: ops.cutlass_scaled_mm(A, B.T, scale_a=As,
    # scale_b=Bs.T, out_dtype=...).
    def cutlass(A, As, B, Bs, out_dtype, block_shape):
        return ops.cutlass_scaled_mm(A, B.t(), out_dtype=out_dtype, scale_a=As, scale_b=Bs.t())

    kernels[VLLM_CUTLASS] = cutlass
    try:
        from vllm.utils.deep_gemm import fp8_gemm_nt
    except Exception as exc:  # noqa: BLE001
        unavailable[VLLM_DEEPGEMM] = f"DeepGEMM not importable ({_one_line(exc)})"
    else:
        import torch

        def deepgemm(A, As, B, Bs, out_dtype, block_shape):
            out = torch.empty(A.shape[0], B.shape[0], dtype=out_dtype, device=A.device)
            fp8_gemm_nt((A, As), (B, Bs), out)
            return out

        kernels[VLLM_DEEPGEMM] = deepgemm
    return kernels, unavailable


def _probe(kernel: LibraryKernel, device: str) -> str | None:
    """None when `kernel` runs a 128 x 256 x 256 block-FP8 product on `device`, else why not.
    (Whether its result is right is checked per problem, against the float64 reference.)"""
    import torch

    A = torch.ones(128, 256, device=device).to(torch.float8_e4m3fn)
    B = torch.ones(256, 256, device=device).to(torch.float8_e4m3fn)
    As = torch.ones(128, 2, device=device)
    Bs = torch.ones(2, 2, device=device)
    try:
        kernel(A, As, B, Bs, torch.bfloat16, (128, 128))
    except Exception as exc:  # noqa: BLE001 - any failure means "cannot run here"
        return f"cannot run here: {_one_line(exc)}"
    return None


def library_kernels(
    device: str, block_shape: tuple[int, int] = (128, 128)
) -> tuple[dict[str, LibraryKernel], dict[str, str]]:
    """The library kernels to time on `device` ("cuda" or "cpu"), and why others are left out.

    Marlin and Humming run through vLLM's kernel classes (`tuner.compare.vllm_linear`) when
    those are importable, on either device (vLLM's own `is_supported` says whether they run
    here); otherwise Marlin is listed as before and Humming not at all.

    Args:
        device: "cuda" or "cpu".
        block_shape: [group_n, group_k] of the weights.

    Returns:
        (backend -> kernel, backend -> one-line reason it is not timed).
    """
    import torch.nn.functional as F

    kernels: dict[str, LibraryKernel] = {}
    unavailable: dict[str, str] = {}
    if hasattr(F, "scaled_mm") and hasattr(F, "ScalingType"):
        scaled_mm = _torch_scaled_mm()
        reason = _probe(scaled_mm, device)
        if reason is None:
            kernels[TORCH_SCALED_MM] = scaled_mm
        else:
            unavailable[TORCH_SCALED_MM] = reason
    else:
        import torch

        unavailable[TORCH_SCALED_MM] = (
            f"torch {torch.__version__} has no torch.nn.functional.scaled_mm with ScalingType"
        )
    if device == "cpu":
        kernels[TORCH_CPU] = _torch_cpu_dequant
        reason = "CPU run: vLLM's GPU kernels are not timed"
        unavailable.update({VLLM_DEEPGEMM: reason, VLLM_CUTLASS: reason, VLLM_MARLIN: reason})
    else:
        vllm_kernels, vllm_unavailable = _vllm_kernels()
        kernels.update(vllm_kernels)
        unavailable.update(vllm_unavailable)
    layered = layer_kernels(block_shape)
    if layered is None:
        unavailable.setdefault(VLLM_MARLIN, "vLLM's kernel classes are not importable here")
        return kernels, unavailable
    for name in layered[0]:
        unavailable.pop(name, None)
    kernels.update(layered[0])
    unavailable.update(layered[1])
    return kernels, unavailable


class CandidateRunner(KernelRunner):
    """A KernelRunner whose "configs" are Candidates: a Triton config runs our kernel, a library
    backend runs its kernel on the same inputs, into the same checks and the same timing
    (weight copies rotated, CUDA graphs, interleaved samples). Dense family only.

    Args:
        problem: the GEMM.
        device: where it runs, "cuda" or "cpu" (the interpreter), as `KernelRunner`.
        library: backend name -> library kernel (`library_kernels`).
        **options: KernelRunner's other options.
    """

    def __init__(
        self, problem: Problem, *, device: str, library: Mapping[str, LibraryKernel], **options
    ) -> None:
        super().__init__(problem, device=device, **options)
        # A kernel with per-problem state (vllm_linear.LayerKernel) gets its own copy.
        self.library = {
            name: kernel.fresh() if hasattr(kernel, "fresh") else kernel
            for name, kernel in library.items()
        }
        self._building: Candidate | None = None

    def _library(self, candidate: Candidate, weights):
        B, Bs = weights
        inputs = self.workload.inputs
        block_shape = self.problem.block_shape
        if block_shape is None:
            raise ValueError("vLLM's linear backends need a block shape [group_n, group_k]")
        return self.library[candidate.backend](
            inputs.A, inputs.As, B, Bs, self.out_dtype, tuple(block_shape)
        )

    def _launch(self, config, out=None):
        if config.config is not None:
            return super()._launch(config.config, out=out)
        result = self._library(config, self.weights[0])
        if out is not None:
            out.copy_(result)
        return result

    def _launch_copy(self, config, copy: int) -> None:
        if config.config is not None:
            super()._launch_copy(config.config, copy)
        else:
            self._library(config, self.weights[copy])

    def _sampler(self, config):
        self._building = config
        try:
            return super()._sampler(config)
        finally:
            self._building = None

    def _ensure_copies(self, copies: int) -> None:
        """Clone the weights as KernelRunner does; then, for a kernel that processes its
        weights (vLLM's classes), process every copy now, before any capture or timed
        launch."""
        super()._ensure_copies(copies)
        building = self._building
        kernel: Any = self.library.get(building.backend) if building is not None else None
        if building is None or building.config is not None or not hasattr(kernel, "prepare"):
            return
        inputs = self.workload.inputs
        kernel.activations(inputs.A, inputs.As, self.out_dtype)
        for B, Bs in self.weights:
            kernel.prepare(B, Bs, self.out_dtype)
