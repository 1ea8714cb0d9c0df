"""The base of the stand-in vLLM (`tests.standin_vllm`): vLLM 0.33.0's platform, config,
triton_utils and quantization keys at its module paths with its names and signatures,
answering from the environment variables the tests set, and the helpers the other part
(`tests.standin_vllm_select`) writes with. No vLLM code: names,
signatures, module paths and behaviour only (the facts are cited where each piece is
written)."""

from __future__ import annotations

from pathlib import Path


def module_path(root: Path, module: str) -> Path:
    """The file of `module` under `root`, its packages' `__init__.py` created."""
    path = root.joinpath(*module.split(".")).with_suffix(".py")
    for folder in [path.parent, *path.parent.parents]:
        if folder == root:
            break
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "__init__.py").touch()
    return path


# What the stand-in answers, read when asked (so a test sets them in the environment of the
# command it runs): the compute capability vLLM "sees" ("9.0"; unset: no GPU, and then
# `VllmConfig()` cannot infer a device type).
CAPABILITY_VARIABLE = "STANDIN_VLLM_CAPABILITY"
# "1": no active GPU driver, so vllm.triton_utils hands out a placeholder instead of triton,
# unless CUDA_VISIBLE_DEVICES is set and empty (vLLM 0.33.0, vllm/triton_utils/importing.py).
NO_DRIVER_VARIABLE = "STANDIN_VLLM_NO_GPU_DRIVER"
# The package of vLLM 0.33.0's scaled-mm kernel classes.
SCALED_MM = "vllm.model_executor.kernels.linear.scaled_mm"


def filled(text: str) -> str:
    """A module's text with the variables' names put in for @CAPABILITY@ and the like."""
    for mark, name in (
        ("@CAPABILITY@", CAPABILITY_VARIABLE),
        ("@NO_DRIVER@", NO_DRIVER_VARIABLE),
    ):
        text = text.replace(mark, name)
    return text


# vllm/platforms: a CUDA platform of the capability the test names, else one with no device
# type (vLLM 0.33.0 on a host without a GPU); the capability check vLLM's MoE launch calls.
_PLATFORMS = """
import os


class _Platform:
    def _seen(self):
        seen = os.environ.get("@CAPABILITY@")
        return tuple(map(int, seen.split("."))) if seen else None

    @property
    def device_type(self):
        return "cuda" if self._seen() else ""

    def is_cuda(self):
        return self._seen() is not None

    def is_device_capability(self, capability):
        seen = self._seen()
        return seen is not None and seen[0] * 10 + seen[1] == capability


current_platform = _Platform()
"""

# vllm/triton_utils: HAS_TRITON, and triton and tl, or in their place the placeholders vLLM
# 0.33.0 substitutes (a module whose `jit` hands back the plain function, so `kernel[grid]`
# raises TypeError) where it finds no single active GPU driver and CUDA_VISIBLE_DEVICES is not
# set empty (vllm/triton_utils/importing.py). The stand-in's kernels import triton from here,
# as vLLM's do.
_TRITON_UTILS = """
import os
import types

_visible = os.environ.get("CUDA_VISIBLE_DEVICES")
HAS_TRITON = not (os.environ.get("@NO_DRIVER@") == "1"
                  and not (_visible is not None and not _visible.strip()))

if HAS_TRITON:
    import triton
    import triton.language as tl
else:
    tl = types.SimpleNamespace(constexpr=lambda value: value)
    triton = types.SimpleNamespace(jit=lambda fn=None, **options: fn or (lambda f: f),
                                   cdiv=lambda a, b: -(-a // b), language=tl)
"""

# vLLM 0.33.0's two block-FP8 quantization keys (quant_utils.py), opaque to the stand-in.
_QUANT_UTILS = """
kFp8Dynamic128Sym = ("fp8", "dynamic", (1, 128))
kFp8Static128BlockSym = ("fp8", "static", (128, 128))
"""

# vLLM 0.33.0's vllm/config: `VllmConfig()` infers the device type from the platform and raises
# "Failed to infer device type" where there is none (config/device.py).
_CONFIG = """
import contextlib


class VllmConfig:
    def __init__(self, model_config=None):
        from vllm.platforms import current_platform

        if not current_platform.device_type:
            raise RuntimeError("Failed to infer device type (the stand-in sees no GPU)")
        self.model_config = model_config


@contextlib.contextmanager
def set_current_vllm_config(vllm_config, check_compile=False, prefix=None):
    yield
"""


def append(root: Path, module: str, text: str) -> None:
    """Add `text` to the stand-in module `module` under `root`: appended after what another
    piece of the stand-in wrote there, never written over it."""
    with module_path(root, module).open("a", encoding="utf-8") as out:
        out.write(text)


def add_basics(root: Path) -> None:
    """vLLM 0.33.0's platform, config, triton_utils and quantization keys at its module paths
    (platforms, config, triton_utils, quantization/utils/quant_utils.py), answering from the
    environment variables above; no vLLM code."""
    for module, text in (  # packages: their text goes in __init__.py
        ("vllm.platforms.__init__", _PLATFORMS),
        ("vllm.config.__init__", _CONFIG),
        ("vllm.triton_utils.__init__", _TRITON_UTILS),
        ("vllm.model_executor.layers.quantization.utils.quant_utils", _QUANT_UTILS),
    ):
        append(root, module, filled(text))
