"""vLLM's own linear-kernel classes (Marlin, Humming) as `tuner compare` library kernels: a
minimal layer carries the FP8 weight and its 128x128 block scales, the class's weight
processing runs on it before any timing, and only `apply_weights` is timed.

Facts about vLLM 0.33.0 (its files under vllm/model_executor/):
- kernels/linear/scaled_mm/marlin.py: `MarlinFP8ScaledMMLinearKernel`;
  kernels/linear/scaled_mm/humming.py: `HummingFP8ScaledMMLinearKernel`; both subclass
  `FP8ScaledMMLinearKernel` (kernels/linear/scaled_mm/ScaledMMLinearKernel.py), whose
  constructor takes `(FP8ScaledMMLinearLayerConfig, layer_param_names)` and asserts
  `is_supported()` and `can_implement(config)`, each a `(bool, reason)` classmethod.
- kernels/linear/__init__.py `init_fp8_linear_kernel`: block-FP8 layers get
  layer_param_names ["weight", "weight_scale", "input_scale", "input_scale_ub"].
- layers/quantization/fp8.py `Fp8LinearMethod.create_weights`: the layer carries `weight`
  [N, K] fp8, the block scales as `weight_scale_inv` [ceil(N/128), ceil(K/128)] fp32,
  `input_size_per_partition` (K), `output_size_per_partition` (N), `orig_dtype`,
  `logical_widths`, `weight_block_size`; its weight keys are `kFp8Static128BlockSym` and
  `kFp8Dynamic128Sym` (layers/quantization/utils/quant_utils.py); `input_scale` is None for
  dynamic activations.
- Marlin is weight-only FP8 (W8A16): `apply_weights` takes the unquantized activations.
  Humming's `apply_weights` likewise takes the layer input.
- Building the kernel constructs a CustomOp (QuantFP8), which needs a current vLLM config
  (config/vllm.py `get_current_vllm_config`); vLLM's benchmarks/lib/utils.py uses
  `set_current_vllm_config(VllmConfig())` for that outside an engine.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from tuner.compare.kernel_names import VLLM_HUMMING, VLLM_MARLIN
from tuner.kernels.vllm_layers import LAYER_CONFIG, block_fp8_layer_config, layer_config_parts

_SCALED_MM = "vllm.model_executor.kernels.linear.scaled_mm"
# backend -> (module, class name), vLLM 0.33.0.
CLASSES = {
    VLLM_MARLIN: (f"{_SCALED_MM}.marlin", "MarlinFP8ScaledMMLinearKernel"),
    VLLM_HUMMING: (f"{_SCALED_MM}.humming", "HummingFP8ScaledMMLinearKernel"),
}
_PARAM_NAMES = ["weight", "weight_scale", "input_scale", "input_scale_ub"]


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"[:200]


def default_vllm_config():
    """A context in which a default `VllmConfig()` is vLLM's current config, as in vLLM's own
    benchmarks outside an engine (vLLM 0.33.0 raises in `get_current_vllm_config` otherwise,
    which the CustomOps of the kernel classes call); nothing when vLLM has no `VllmConfig`.
    Its model config is None: use `server_vllm_config` to ask vLLM's selection."""
    return _current(_vllm_config())


@dataclass(frozen=True)
class _TextConfig:
    """The part of a Hugging Face config vLLM's kernel selection reads."""

    model_type: str | None


@dataclass(frozen=True)
class ModelConfigView:
    """What vLLM 0.33.0's kernel selection reads of a server's model config, for one model:
    `hf_text_config.model_type` (DeepGEMM's `can_implement`, kernels/linear/scaled_mm/
    deep_gemm.py, and the fused-MoE oracle, fused_moe/oracle/fp8.py, turn DeepGEMM off for
    some model types on Blackwell; DeepGEMM refuses any layer without a model config). Building
    vLLM's own ModelConfig needs the checkpoint's files, which tuning does not; nothing else of
    it is read where the selection runs.

    Attributes:
        hf_text_config, hf_config: carry `model_type` (None when not known).
    """

    hf_text_config: _TextConfig
    hf_config: _TextConfig

    @classmethod
    def of(cls, model_type: str | None) -> ModelConfigView:
        """The view of a model of this Hugging Face model type (e.g. "deepseek_v3")."""
        return cls(_TextConfig(model_type), _TextConfig(model_type))


def server_vllm_config(model_type: str | None):
    """A context in which vLLM's current config is a `VllmConfig()` with a model config of
    `model_type` (`ModelConfigView`): what a server's kernel selection sees, so DeepGEMM's
    `can_implement` answers as it does there. Its linear backend is vLLM's default ("auto").

    Raises:
        Exception: whatever `VllmConfig()` raises (vLLM 0.33.0: RuntimeError "Failed to infer
            device type" where it sees no GPU) or importing vllm.config raises.
    """
    from vllm.config import VllmConfig

    vllm_config = VllmConfig()
    vllm_config.model_config = ModelConfigView.of(model_type)  # a pydantic dataclass field
    return _current(vllm_config)


def _vllm_config() -> object | None:
    """A default `VllmConfig()` when vLLM has one, else None."""
    try:
        from vllm.config import VllmConfig
    except Exception:  # noqa: BLE001 - a vLLM without it (or a stand-in) needs none
        return None
    return VllmConfig()


def _current(vllm_config: object | None):
    """`set_current_vllm_config(vllm_config)`, or nothing when there is none."""
    if vllm_config is None:
        return contextlib.nullcontext()
    from vllm.config import set_current_vllm_config

    return set_current_vllm_config(vllm_config)


class _ScaledMMKernel(Protocol):
    """What LayerKernel uses of a vLLM `FP8ScaledMMLinearKernel` object (vLLM 0.33.0,
    kernels/linear/scaled_mm/ScaledMMLinearKernel.py)."""

    def process_weights_after_loading(self, layer: Any) -> None:
        """Turn the layer's loaded weight and scales into the kernel's own layout."""
        ...

    def apply_weights(self, layer: Any, x: Any) -> Any:
        """C [M, N] from the layer input x [M, K] (a torch.Tensor)."""
        ...


@dataclass
class _Prepared:
    """One weight copy after the class's processing: the kernel object and its layer."""

    kernel: _ScaledMMKernel
    layer: object
    weight: object  # the source tensor, held so its id is not reused while this lives


class LayerKernel:
    """A vLLM linear-kernel class as a library kernel of `CandidateRunner`:
    `(A, As, B, Bs, out_dtype, block_shape) -> C [M, N]`.

    Per weight copy B (a new one seen, or `prepare`), a layer is built and the class's
    `process_weights_after_loading` runs on it; the activations x = A * As (dequantized, in
    out_dtype: what the layer receives in serving, vLLM quantizing it itself when it needs
    to) are made once per A. A call then runs `apply_weights(layer, x)` only. Use `fresh()`
    per problem so no state crosses problems.

    Args:
        kernel_class: the vLLM class.
    """

    def __init__(self, kernel_class) -> None:
        self.kernel_class = kernel_class
        self._layers: dict[int, _Prepared] = {}
        self._x: tuple[object, object] | None = None
        self._vllm_config: list[object | None] = []  # made on first use, then kept

    def fresh(self) -> LayerKernel:
        """A copy with no prepared layers."""
        return LayerKernel(self.kernel_class)

    def prepare(self, B, Bs, out_dtype) -> None:
        """Build and process the layer of weight copy B [N, K] fp8, Bs fp32 (untimed)."""
        if id(B) in self._layers:
            return
        import torch

        N, K = B.shape
        config = block_fp8_layer_config(N, K, out_dtype)
        layer: Any = torch.nn.Module()  # carries vLLM's layer attributes too
        layer.register_parameter("weight", torch.nn.Parameter(B.clone(), requires_grad=False))
        layer.register_parameter(
            "weight_scale_inv", torch.nn.Parameter(Bs.clone(), requires_grad=False)
        )
        layer.input_size_per_partition, layer.output_size_per_partition = K, N
        layer.logical_widths, layer.orig_dtype = [N], out_dtype
        layer.weight_block_size = [128, 128]
        layer.input_scale = None
        if not self._vllm_config:
            self._vllm_config.append(_vllm_config())
        with _current(self._vllm_config[0]):
            kernel = self.kernel_class(config, layer_param_names=list(_PARAM_NAMES))
            kernel.process_weights_after_loading(layer)
        self._layers[id(B)] = _Prepared(kernel, layer, B)

    def activations(self, A, As, out_dtype):
        """x [M, K] in out_dtype: A dequantized with its per-(1 x group_k) scales As."""
        if self._x is None or self._x[0] is not A:
            group_k = -(-A.shape[1] // As.shape[1])
            x = A.float() * As.repeat_interleave(group_k, dim=1)[:, : A.shape[1]]
            self._x = (A, x.to(out_dtype))
        return self._x[1]

    def __call__(self, A, As, B, Bs, out_dtype, block_shape):
        self.prepare(B, Bs, out_dtype)
        prepared = self._layers[id(B)]
        return prepared.kernel.apply_weights(prepared.layer, self.activations(A, As, out_dtype))


def _load(backend: str, block_shape: tuple[int, int]) -> LayerKernel | str:
    """The backend's LayerKernel, or why it is not timed (one line)."""
    module, name = CLASSES[backend]
    try:
        kernel_class = getattr(importlib.import_module(module), name)
    except Exception as exc:  # noqa: BLE001 - any import failure means "not here"
        return f"{name} not importable ({_one_line(exc)})"
    if tuple(block_shape) != (128, 128):
        return f"block_shape {list(block_shape)}: only [128, 128] is wired to {name}"
    try:
        layer_config_parts()  # the layer's description must be importable too
        supported, reason = kernel_class.is_supported()
        if not supported:
            return f"{name}: {reason}"
    except Exception as exc:  # noqa: BLE001
        return f"{name}: {_one_line(exc)}"
    return LayerKernel(kernel_class)


def vllm_classes_importable() -> bool:
    """Whether vLLM's scaled-mm kernel config class can be imported here."""
    try:
        importlib.import_module(LAYER_CONFIG[0])
    except Exception:  # noqa: BLE001
        return False
    return True


def layer_kernels(
    block_shape: tuple[int, int] = (128, 128),
) -> tuple[dict[str, Callable[..., object]], dict[str, str]] | None:
    """Marlin and Humming through vLLM's classes, when vLLM's kernel classes are importable.

    Args:
        block_shape: [group_n, group_k] of the model's weights.

    Returns:
        None when vLLM's scaled-mm kernel classes cannot be imported here; else
        (backend -> LayerKernel, backend -> one-line reason it is not timed).
    """
    if not vllm_classes_importable():
        return None
    kernels: dict[str, Callable[..., object]] = {}
    unavailable: dict[str, str] = {}
    for backend in CLASSES:
        loaded = _load(backend, block_shape)
        if isinstance(loaded, str):
            unavailable[backend] = loaded
        else:
            kernels[backend] = loaded
    return kernels, unavailable
