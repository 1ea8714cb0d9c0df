"""Files timed against the alternatives: `versus` (the one check-and-time path of `tuner verify`
and `tuner compare`: vLLM's pick from a file against its default config, on and off the keys,
and tuned Triton against vLLM's other kernels, with their verdicts) and `backends` (the kernels
compare times beside ours). Imports tuner.kernels, measure, inputs and files; the store is read
by the caller (`tuner.cli.compare`)."""
