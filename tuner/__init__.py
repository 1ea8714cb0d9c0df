"""blockfp8-tuner: autotune vLLM's W8A8 block-FP8 Triton GEMM over the full M grid."""

__version__ = "0.1.0"
