"""Shared test setup: Triton's CPU interpreter unless the caller chose otherwise."""

import os

# Must happen before tuner.kernel is imported: triton.jit reads it when it decorates the kernel.
os.environ.setdefault("TRITON_INTERPRET", "1")
