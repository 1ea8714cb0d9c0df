"""Running sweeps: planning a sweep's tasks in the store, the supervisor that starts, watches and
restarts worker processes, the workers that claim tasks and search them, and their compile gate.
Imports tuner.kernels, measure, search, inputs, files and db; the only tuner package besides the
CLI and the HTTP service that touches the store."""
