"""The tuner's table of vLLM 0.33.0's block-FP8 linear kernels (`tuner.kernels.vllm_table`,
`tuner.inputs.backends`) against the wheel's own source: the kernels and their order, the
Humming reordering (bench/real_vllm_facts.py's), the model types DeepGEMM is turned off for,
the --linear-backend values, the start-up line that names the kernel, and the torch vLLM
pins."""

from __future__ import annotations

import ast

from bench.real_vllm_facts import HUMMING_FIRST_CAPABILITIES
from tests.engines.engine_code import wheel_text
from tuner.inputs.backends import LINEAR_BACKENDS, selected_kernel
from tuner.kernels.vllm_table import DEEPGEMM_OFF_ON_BLACKWELL, FP8_BLOCK_KERNELS

LINEAR = "vllm/model_executor/kernels/linear/__init__.py"


def _assigned(text: str, name: str) -> ast.expr:
    """The value assigned to a module-level `name` in a module's source."""
    for node in ast.parse(text).body:
        if isinstance(node, ast.AnnAssign | ast.Assign):
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                assert node.value is not None
                return node.value
    raise AssertionError(f"no {name} in the module")


def test_the_kernels_their_order_and_the_reordering_are_vllms(vllm_wheel) -> None:
    kernels = _assigned(wheel_text(vllm_wheel, LINEAR), "_POSSIBLE_FP8_BLOCK_KERNELS")
    assert isinstance(kernels, ast.Dict)
    cuda = next(
        v
        for k, v in zip(kernels.keys, kernels.values, strict=True)
        if ast.unparse(k) == "PlatformEnum.CUDA"
    )
    assert [ast.unparse(e) for e in cuda.elts] == [name for name, _ in FP8_BLOCK_KERNELS]
    priority = "vllm/model_executor/layers/quantization/utils/humming/priority.py"
    preferred = _assigned(wheel_text(vllm_wheel, priority), "_HUMMING_PREFERRED_CAPABILITIES")
    assert ast.unparse(preferred) == f"frozenset({set(HUMMING_FIRST_CAPABILITIES)})"
    deep_gemm = wheel_text(vllm_wheel, "vllm/utils/deep_gemm.py")
    off = ast.literal_eval(_assigned(deep_gemm, "_DEEPGEMM_BLACKWELL_EXCLUDED_MODEL_TYPES"))
    assert off == DEEPGEMM_OFF_ON_BLACKWELL


def test_the_server_options_and_lines_the_tuner_reads_are_vllms(vllm_wheel) -> None:
    backends = _assigned(wheel_text(vllm_wheel, "vllm/config/kernel.py"), "LinearBackend")
    assert isinstance(backends, ast.Subscript)
    assert ast.literal_eval(backends.slice) == LINEAR_BACKENDS
    # choose_scaled_mm_linear_kernel's start-up line, as `tuner shapes from-log` reads it
    text = wheel_text(vllm_wheel, LINEAR)
    assert '"Selected %s for %s",' in text
    logged = "Selected %s for %s" % (FP8_BLOCK_KERNELS[4][0], "Fp8LinearMethod")  # noqa: UP031
    assert selected_kernel(logged) == (FP8_BLOCK_KERNELS[4][0], "Fp8LinearMethod")
    metadata = wheel_text(vllm_wheel, "vllm-0.33.0.dist-info/METADATA")
    # What vLLM 0.33.0 runs with (torch 2.14.0's own METADATA: `Requires-Dist: triton~=3.8.0`):
    # the Triton its kernels, and so the tuned files, are compiled with in the serving image.
    assert "Requires-Dist: torch==2.14.0" in metadata.splitlines()
