"""Kernel families: one subpackage per GEMM family vLLM tunes with a JSON file of Triton configs
(kernel, float64 reference, config space and constraints, vLLM's default config, file naming),
the config type they share, and the seam a family registers through. Imports nothing else of
tuner; only a family's kernel and target modules, and `interpreter` (the one shim for
Triton < 3.8's CPU interpreter), import torch or triton."""
