"""vLLM's dense W8A8 block-FP8 GEMM (`w8a8_triton_block_scaled_mm`): the Triton kernel, its
compile-for-target, the float64 reference, the config space and default, the file names, what
`tuner doctor` and vLLM's selection say of it (`serving`) and the kernel paired with vLLM's for
a compiled-code comparison (`fidelity`). Imports only tuner.kernels."""
