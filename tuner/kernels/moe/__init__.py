"""vLLM's fused-MoE W8A8 block-FP8 experts (`fused_moe_kernel`, fp8_w8a8 block path): the Triton
kernel and its host wrapper, `moe_align_block_size`, the float64 references, the config space and
per-M default, the file names and the workload, what `tuner doctor` and vLLM's selection say of
it (`serving`) and the kernel paired with vLLM's for a compiled-code comparison (`fidelity`).
Imports only tuner.kernels."""
