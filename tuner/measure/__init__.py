"""Measuring one config on one device: the ways a sweep measures behind one small protocol
(`runners`: a GPU, the interpreter, a replay of a recorded `landscape`), the live runner
(correctness gate, then timing), the timing method and noise control (`noise`), roofline
figures, compile-for-target pruning and the precompile pool (`compile`). Imports only
tuner.kernels; knows nothing of the store, the search or HTTP."""
