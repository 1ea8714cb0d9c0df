"""The kernels `tuner compare` times besides our Triton kernel: torch's block-scaled FP8
matmul, vLLM's CUTLASS and DeepGEMM ops, and vLLM's Marlin class (sm89's default), each on the
inputs of one `CandidateRunner` (our KernelRunner: the same check against the float64
reference and the same timing as a trial).

Facts about vLLM 0.33.0 (its files under vllm/model_executor/):
- kernels/linear/scaled_mm/marlin.py `MarlinFP8ScaledMMLinearKernel` subclasses
  `FP8ScaledMMLinearKernel`, whose constructor takes
  `(FP8ScaledMMLinearLayerConfig, layer_param_names)`; `is_supported()` is a `(bool, reason)`
  classmethod. Marlin is weight-only FP8 (W8A16): `apply_weights` takes the layer input as it is.
- layers/quantization/fp8.py `Fp8LinearMethod.create_weights`: the layer carries `weight`
  [N, K] fp8, the block scales as `weight_scale_inv`, `input_size_per_partition` (K),
  `output_size_per_partition` (N), `orig_dtype`, `logical_widths`, `weight_block_size`;
  block-FP8 layers get layer_param_names ["weight", "weight_scale", "input_scale",
  "input_scale_ub"] (kernels/linear/__init__.py `init_fp8_linear_kernel`).
- Building a kernel constructs a CustomOp, which needs a current vLLM config (config/vllm.py
  `get_current_vllm_config`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

from tuner.compare import versus
from tuner.core import error_line
from tuner.kernels.serving import block_fp8_layer_config
from tuner.kernels.vllm_table import MARLIN
from tuner.measure.runner import KernelRunner, Problem

# A library kernel: (A [M, K] fp8, As [M, ceil(K/group_k)] fp32, B [N, K] fp8,
# Bs [ceil(N/group_n), ceil(K/group_k)] fp32, out dtype, block_shape) -> C [M, N].
LibraryKernel = Callable[..., object]
# vLLM 0.33.0's module of MARLIN, the class.
MARLIN_MODULE = "vllm.model_executor.kernels.linear.scaled_mm.marlin"


def _torch_scaled_mm(A, As, B, Bs, out_dtype, block_shape):
    """`torch.nn.functional.scaled_mm` with BlockWise1x128 scales for A and BlockWise128x128 for
    B, laid out as cuBLAS takes them (PyTorch's test_scaled_matmul_cuda.py): As [M, K/128]
    outer-dim-major; Bs padded along K to a multiple of 4 and K-major ([K/128, N/128])."""
    import torch.nn.functional as F

    scale_b = F.pad(Bs, (0, -Bs.shape[1] % 4)).t()
    return F.scaled_mm(
        A,
        B.t(),
        As.t().contiguous().t(),
        F.ScalingType.BlockWise1x128,
        scale_b,
        F.ScalingType.BlockWise128x128,
        output_dtype=out_dtype,
    )


def _torch_cpu_dequant(A, As, B, Bs, out_dtype, block_shape):
    """The interpreter's torch neighbour (not a vLLM kernel): both operands dequantized
    blockwise to float32 and multiplied on the CPU."""
    import torch

    group_n, group_k = block_shape
    a = A.float() * As.repeat_interleave(group_k, dim=1)[:, : A.shape[1]]
    b_scale = Bs.repeat_interleave(group_n, dim=0).repeat_interleave(group_k, dim=1)
    b = B.float() * b_scale[: B.shape[0], : B.shape[1]]
    return torch.matmul(a, b.t()).to(out_dtype)


def _vllm_ops() -> tuple[dict[str, LibraryKernel], dict[str, str]]:
    """vLLM's CUTLASS op (fp8_utils.cutlass_scaled_mm's call) and DeepGEMM's `fp8_gemm_nt`,
    where vLLM's CUDA build is importable (a kernel that cannot run fails its check)."""
    import torch

    try:
        from vllm import _custom_ops as ops
        from vllm.utils.deep_gemm import fp8_gemm_nt
    except Exception as exc:  # noqa: BLE001 - any import failure means "not here"
        why = f"vLLM not importable here ({error_line(exc)})"
        return {}, dict.fromkeys((versus.VLLM_DEEPGEMM, versus.VLLM_CUTLASS), why)

    def cutlass(A, As, B, Bs, out_dtype, block_shape):
        return ops.cutlass_scaled_mm(A, B.t(), out_dtype=out_dtype, scale_a=As, scale_b=Bs.t())

    def deepgemm(A, As, B, Bs, out_dtype, block_shape):
        out = torch.empty(A.shape[0], B.shape[0], dtype=out_dtype, device=A.device)
        fp8_gemm_nt((A, As), (B, Bs), out)
        return out

    return {versus.VLLM_CUTLASS: cutlass, versus.VLLM_DEEPGEMM: deepgemm}, {}


def _marlin(block_shape: tuple[int, int]) -> LayerKernel | str:
    """vLLM's Marlin class as a LayerKernel, or why it is not timed (one line)."""
    try:
        kernel_class = getattr(importlib.import_module(MARLIN_MODULE), MARLIN)
        if tuple(block_shape) != (128, 128):
            return f"block_shape {list(block_shape)}: only [128, 128] is wired to {MARLIN}"
        supported, reason = kernel_class.is_supported()
    except Exception as exc:  # noqa: BLE001 - any import failure means "not here"
        return f"{MARLIN} not importable ({error_line(exc)})"
    return LayerKernel(kernel_class) if supported else f"{MARLIN}: {reason}"


def library_kernels(
    device: str, block_shape: tuple[int, int] = (128, 128)
) -> tuple[dict[str, LibraryKernel], dict[str, str]]:
    """(kernel name -> library kernel, kernel name -> why it is not timed) on `device`: on
    "cuda" torch's and vLLM's ops (one that cannot run here fails its check), on "cpu" the
    dequantizing stand-in; Marlin through vLLM's class wherever vLLM's own `is_supported`
    says it runs."""
    kernels: dict[str, LibraryKernel]
    if device == "cpu":
        why = "CPU run: the GPU kernels are not timed"
        kernels = {versus.TORCH_CPU: _torch_cpu_dequant}
        unavailable = dict.fromkeys(
            (versus.TORCH_SCALED_MM, versus.VLLM_DEEPGEMM, versus.VLLM_CUTLASS), why
        )
    else:
        kernels, unavailable = _vllm_ops()
        kernels[versus.TORCH_SCALED_MM] = _torch_scaled_mm
    marlin = _marlin(block_shape)
    if isinstance(marlin, str):
        unavailable[versus.VLLM_MARLIN] = marlin
    else:
        kernels[versus.VLLM_MARLIN] = marlin
    return kernels, unavailable


class LayerKernel:
    """A vLLM linear-kernel class as a library kernel: per weight copy B a layer is built and
    the class's `process_weights_after_loading` runs on it (`prepare`, untimed); the
    activations x = A * As (dequantized, in out_dtype: what the layer receives in serving) are
    made once; a call then runs `apply_weights(layer, x)` only. One per CandidateRunner."""

    def __init__(self, kernel_class) -> None:
        self.kernel_class = kernel_class
        self._layers: dict[int, tuple[Any, Any, Any]] = {}  # id(B) -> (kernel, layer, B)
        self._x: Any = None
        self._vllm_config: Any = None

    def prepare(self, B, Bs, out_dtype) -> None:
        """Build and process the layer of weight copy B [N, K] fp8, Bs fp32 (untimed)."""
        if id(B) in self._layers:
            return
        import torch
        from vllm.config import VllmConfig, set_current_vllm_config

        N, K = B.shape
        layer: Any = torch.nn.Module()  # carries vLLM's layer attributes too
        for name, tensor in (("weight", B), ("weight_scale_inv", Bs)):
            layer.register_parameter(name, torch.nn.Parameter(tensor.clone(), requires_grad=False))
        layer.input_size_per_partition, layer.output_size_per_partition = K, N
        layer.logical_widths, layer.orig_dtype = [N], out_dtype
        layer.weight_block_size, layer.input_scale = [128, 128], None
        names = ["weight", "weight_scale", "input_scale", "input_scale_ub"]
        # vLLM's current config while the class is built: one default `VllmConfig()`, as vLLM's
        # benchmarks use outside an engine.
        self._vllm_config = self._vllm_config or VllmConfig()
        with set_current_vllm_config(self._vllm_config):
            kernel = self.kernel_class(
                block_fp8_layer_config(N, K, out_dtype), layer_param_names=names
            )
            kernel.process_weights_after_loading(layer)
        self._layers[id(B)] = (kernel, layer, B)  # B held: its id is not reused meanwhile

    def activations(self, A, As, out_dtype):
        """x [M, K] in out_dtype: A (the runner's one) dequantized with its per-(1 x group_k)
        scales As, made on the first call."""
        if self._x is None:
            group_k = -(-A.shape[1] // As.shape[1])
            x = A.float() * As.repeat_interleave(group_k, dim=1)[:, : A.shape[1]]
            self._x = x.to(out_dtype)
        return self._x

    def __call__(self, A, As, B, Bs, out_dtype, block_shape):
        self.prepare(B, Bs, out_dtype)
        kernel, layer, _ = self._layers[id(B)]
        return kernel.apply_weights(layer, self.activations(A, As, out_dtype))


class CandidateRunner(KernelRunner):
    """A KernelRunner whose "configs" are Candidates: a Triton config runs our kernel, a library
    kernel runs on the same inputs, into the same checks and timing (weight copies rotated,
    CUDA graphs, interleaved samples). Dense family only; `library`: `library_kernels`'s."""

    def __init__(
        self, problem: Problem, *, device: str, library: Mapping[str, LibraryKernel], **options
    ) -> None:
        super().__init__(problem, device=device, **options)
        self.library: dict[str, LibraryKernel] = {
            name: LayerKernel(kernel.kernel_class) if isinstance(kernel, LayerKernel) else kernel
            for name, kernel in library.items()
        }

    def _launch_copy(self, config, copy: int, out: Any = None) -> Any:
        if config.config is not None:
            return super()._launch_copy(config.config, copy, out)
        inputs, block_shape = self.workload, tuple(self.problem.block_shape or (128, 128))
        kernel = self.library[config.backend]
        result = kernel(inputs.A, inputs.As, *self.weights[copy], self.out_dtype, block_shape)
        return result if out is None else out.copy_(result)

    def _ensure_copies(self, copies: int) -> None:
        """Clone the weights as KernelRunner does; then process every copy for each of vLLM's
        classes now, before any capture or timed launch."""
        super()._ensure_copies(copies)
        inputs = self.workload
        for kernel in self.library.values():
            if isinstance(kernel, LayerKernel):
                kernel.activations(inputs.A, inputs.As, self.out_dtype)
                for B, Bs in self.weights:
                    kernel.prepare(B, Bs, self.out_dtype)
