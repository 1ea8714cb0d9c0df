"""What users bring: model shapes (the `shapes/` TOML files and the user's own), vLLM and SGLang
server logs (and the next step they call for), Hugging Face config.json files,
and GPU names as vLLM spells them. Imports only tuner.kernels."""
