"""Measuring one config on one device: the live runner (correctness gate, then timing),
the ways a sweep measures behind one protocol (`runners`: GPU, interpreter, replay of a
recorded landscape, `landscape`), serving-like timing, noise control, roofline ceilings,
compile-for-target pruning and the precompile pool. Imports only tuner.kernels; knows nothing
of the store, the search or HTTP."""
