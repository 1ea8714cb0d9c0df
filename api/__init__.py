"""HTTP service that serves merged vLLM config files from the store."""
