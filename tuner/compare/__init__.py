"""Files timed against the alternatives: `verify` (vLLM's pick from a file against its default
config, on and off the keys) and `shipped` (our winners, vLLM's shipped configs and the default,
side by side). Imports tuner.kernels, measure and files; the store is read by the caller."""
