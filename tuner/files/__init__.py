"""Config files: vLLM's body format and nearest-M lookup, the merge of winners (no-regression
rule, coverage), imports, provenance, mount recipes, and `device_files`, the one path from the
store to a device's files. Imports tuner.kernels, tuner.inputs and db; never torch or triton."""
