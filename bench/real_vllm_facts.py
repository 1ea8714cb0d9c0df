"""The facts the stand-in vLLM (tests/standin_vllm*.py) and the tuner's table of vLLM 0.33.0
rest on, checked against an installed vLLM, without a GPU: run with that vLLM's Python.

    /path/to/vllm-venv/bin/python bench/real_vllm_facts.py

Checks, one line each ("ok: ..." or "FAIL: ..."), exit 1 when one fails:
- the 8 block-FP8 kernel classes of `_POSSIBLE_FP8_BLOCK_KERNELS[CUDA]` and their order, as
  `tuner.kernels.vllm_table.FP8_BLOCK_KERNELS` lists them, and after vLLM's own reordering
  (`_resolve_backend_kernels`) at compute capability 89 and 90, as `block_kernel_order` (here)
  gives;
- DeepGEMM's `can_implement` refuses a layer under a vLLM config without a model config, and
  gets past its model checks under a model config view carrying the model type (on a host
  without a GPU it then stops at the hardware check);
- `fused_moe_kernel`'s parameters (names, order, constexpr, defaults) and the signatures of
  `dispatch_fused_moe_kernel` and `invoke_fused_moe_triton_kernel` equal the stand-in's;
- `VllmConfig()` raises where vLLM sees no device (as the stand-in's does).
"""

from __future__ import annotations

import ast
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

FAILED: list[str] = []


def check(ok: bool, what: str, detail: str = "") -> None:
    """Print one line; remember a failure."""
    print(f"{'ok' if ok else 'FAIL'}: {what}" + (f" ({detail})" if detail and not ok else ""))
    if not ok:
        FAILED.append(what)


def _parameters(node: ast.FunctionDef) -> list[tuple[str, bool, str | None]]:
    args = node.args.args
    defaults = [None] * (len(args) - len(node.args.defaults)) + [
        ast.unparse(d) for d in node.args.defaults
    ]
    return [
        (a.arg, a.annotation is not None and "constexpr" in ast.unparse(a.annotation), d)
        for a, d in zip(args, defaults, strict=True)
    ]


# vLLM 0.33.0, model_executor/layers/quantization/utils/humming/priority.py
# (`_HUMMING_PREFERRED_CAPABILITIES`): on these compute capabilities vLLM moves Humming directly
# ahead of Marlin before walking the list (`prioritize_humming`, from `_resolve_backend_kernels`).
HUMMING_FIRST_CAPABILITIES = (90,)


def block_kernel_order(capability: int | None) -> tuple[str, ...]:
    """The block-FP8 kernel classes in the order vLLM 0.33.0 tries them on a compute capability
    (90 for sm90): `FP8_BLOCK_KERNELS` with Humming moved directly ahead of Marlin on
    `HUMMING_FIRST_CAPABILITIES`; None (unknown) keeps the listed order."""
    from tuner.kernels.vllm_table import FP8_BLOCK_KERNELS, HUMMING, MARLIN

    names = [name for name, _ in FP8_BLOCK_KERNELS]
    if capability in HUMMING_FIRST_CAPABILITIES:
        names.insert(names.index(MARLIN), names.pop(names.index(HUMMING)))
    return tuple(names)


def kernel_list() -> None:
    from vllm.model_executor.kernels import linear
    from vllm.platforms import PlatformEnum

    from tuner.kernels.vllm_table import FP8_BLOCK_KERNELS

    listed = [k.__name__ for k in linear._POSSIBLE_FP8_BLOCK_KERNELS[PlatformEnum.CUDA]]
    check(
        listed == [name for name, _ in FP8_BLOCK_KERNELS],
        "the 8 block-FP8 kernel classes, in vLLM's order",
        str(listed),
    )
    for capability in (89, 90, 100):
        order = [
            k.__name__
            for k in linear._resolve_backend_kernels(
                list(linear._POSSIBLE_FP8_BLOCK_KERNELS[PlatformEnum.CUDA]),
                "scaled-mm",
                quantization="fp8_block_w8a8",
                compute_capability=capability,
            )
        ]
        check(
            tuple(order) == block_kernel_order(capability),
            f"vLLM's reordered list at compute capability {capability}",
            str(order),
        )


def deepgemm_reads_the_model_config() -> None:
    import torch
    from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config
    from vllm.model_executor.kernels.linear.scaled_mm.deep_gemm import (
        DeepGemmFp8BlockScaledMMKernel,
    )

    from tuner.kernels.serving import block_fp8_layer_config

    text = SimpleNamespace(model_type="deepseek_v3")  # what vLLM reads of a server's model config

    layer = block_fp8_layer_config(7168, 18432, torch.bfloat16)
    bare = VllmConfig(device_config=DeviceConfig(device="cpu"))
    with set_current_vllm_config(bare):
        refused = DeepGemmFp8BlockScaledMMKernel.can_implement(layer)
    check(
        refused == (False, "Model configuration is required."),
        "DeepGEMM refuses a layer without a model config",
        str(refused),
    )
    served = VllmConfig(device_config=DeviceConfig(device="cpu"))
    served.model_config = SimpleNamespace(hf_text_config=text, hf_config=text)
    with set_current_vllm_config(served):
        answer = DeepGemmFp8BlockScaledMMKernel.can_implement(layer)
    check(
        answer[0] or answer[1] == "The provided metadata is not supported.",
        "DeepGEMM gets past its model checks with the model config view",
        str(answer),
    )


def moe_signatures() -> None:
    import vllm

    from tests.standin_vllm import VLLM_MOE_PARAMETERS, build_standin

    path = Path(vllm.__file__).parent / "model_executor/layers/fused_moe/fused_moe.py"
    functions = {
        n.name: n for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef)
    }
    real = _parameters(functions["fused_moe_kernel"])
    check(
        real == list(VLLM_MOE_PARAMETERS),
        f"fused_moe_kernel's {len(real)} parameters equal the stand-in's",
    )
    root = build_standin(Path(tempfile.mkdtemp()) / "site")
    text = (root / "vllm/model_executor/layers/fused_moe/fused_moe.py").read_text()
    standin = {n.name: n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef)}
    for name in ("dispatch_fused_moe_kernel", "invoke_fused_moe_triton_kernel"):
        ours = [(a, d) for a, _, d in _parameters(standin[name])]
        theirs = [(a, d) for a, _, d in _parameters(functions[name])]
        check(ours == theirs, f"{name}'s signature equals the stand-in's", str(theirs))


def config_needs_a_device() -> None:
    from vllm.config import VllmConfig
    from vllm.platforms import current_platform

    if current_platform.device_type:
        print(f"skip: vLLM sees a {current_platform.device_type} device here")
        return
    try:
        VllmConfig()
    except RuntimeError as exc:
        check("Failed to infer device type" in str(exc), "VllmConfig() needs a device", str(exc))
    else:
        check(False, "VllmConfig() needs a device", "it constructed")


def main() -> None:
    for fact in (
        kernel_list,
        deepgemm_reads_the_model_config,
        moe_signatures,
        config_needs_a_device,
    ):
        try:
            fact()
        except Exception as exc:  # noqa: BLE001 - one line per fact that cannot be checked
            check(False, fact.__name__, f"{type(exc).__name__}: {exc}"[:300])
    import vllm

    print(
        f"{'all facts hold' if not FAILED else f'{len(FAILED)} fact(s) fail'} against "
        f"vLLM {vllm.__version__}"
    )
    sys.exit(1 if FAILED else 0)


if __name__ == "__main__":
    main()
