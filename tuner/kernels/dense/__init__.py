"""vLLM's dense W8A8 block-FP8 GEMM (`w8a8_triton_block_scaled_mm`): the Triton kernel, its
compile-for-target, the float64 reference, the config space and default, and the file names.
Imports only tuner.kernels."""
