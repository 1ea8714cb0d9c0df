"""GEMM shapes (N, K) per model and tensor-parallel size, as data files; loaded by
tuner.inputs.shapes."""
