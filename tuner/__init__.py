"""blockfp8-tuner: autotune vLLM's W8A8 block-FP8 Triton GEMM over the full M grid.

Subpackages, lowest first (each imports only those below it): kernels; measure, inputs; search;
files; run, compare; and cli on top (`tests/test_layout.py` checks the order).
"""

__version__ = "0.1.0"
