"""Kernel families: one subpackage per GEMM family vLLM tunes with a JSON file of Triton configs
(kernel, float64 reference, config space and constraints, vLLM's default config, file naming,
what doctor says of it and its kernel paired with vLLM's), the config type they share, the shape
a family is tuned for (`shape`), the seam a family registers through (`family`, with `serving`:
what doctor and vLLM's selection say of a family), two kernels' compiled code compared
(`fidelity`), and the tuner's table of vLLM's block-FP8 linear kernels (`vllm_table`). Imports
nothing else of tuner; only a family's kernel, target and workload modules, and `interpreter`
(the one shim for Triton < 3.8's CPU interpreter), import torch or triton at import; the
compile, serving and vLLM helpers import them (and vLLM) when called."""
