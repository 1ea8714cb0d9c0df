"""Files timed against the alternatives: `verify` (vLLM's pick from a file against its default
config, on and off the keys; `verify_run`, the flow of `tuner verify` over a model's files and
its `--fix` passes) and `shipped` (our winners, vLLM's shipped configs and the default, side by
side). Imports tuner.kernels, measure, inputs and files; the store is read by the caller."""
