"""The one name of each kernel `tuner compare` times, used alike in its tables, summary lines,
"not timed" lines, the stored comparison (GET /devices/{d}/comparisons), and the report.

Pure names; nothing here imports torch, Triton or vLLM.
"""

from __future__ import annotations

TRITON_TUNED = "triton-tuned"  # the Triton kernel with the config vLLM picks from the files
TRITON_DEFAULT = "triton-default"  # the Triton kernel with vLLM's default config
TORCH_SCALED_MM = "torch-scaled_mm"  # torch.nn.functional.scaled_mm, block-wise scales
TORCH_CPU = "torch-dequant-cpu"  # dequantize + matmul on the CPU (the interpreter's stand-in)
VLLM_DEEPGEMM = "vllm-deepgemm"
VLLM_CUTLASS = "vllm-cutlass"
VLLM_MARLIN = "vllm-marlin"
VLLM_HUMMING = "vllm-humming"
# Column order of the tables.
BACKENDS = (
    TRITON_TUNED,
    TRITON_DEFAULT,
    TORCH_SCALED_MM,
    TORCH_CPU,
    VLLM_DEEPGEMM,
    VLLM_CUTLASS,
    VLLM_MARLIN,
    VLLM_HUMMING,
)


def column_header(name: str) -> str:
    """A table header for a kernel's name: the name itself, broken after each '-' so that a
    narrow column shows it on several lines ("triton-" over "tuned"), never another name."""
    return name.replace("-", "-\n")
