"""Files timed against the alternatives: `verify` (vLLM's pick from a file against its default
config, on and off the keys, and `--fix`'s passes), `versus` and `backends` (tuned Triton
against vLLM's other kernels), `doctor` (what vLLM runs there). Imports
tuner.kernels, measure, inputs and files; the store is read by the caller."""
