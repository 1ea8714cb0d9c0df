"""The hash of a kernel's source text: the provenance stored with every trial."""

from __future__ import annotations

import hashlib


def kernel_source_hash(source: str) -> str:
    """sha256 hex digest of a kernel function's source text (UTF-8).

    Args:
        source: the dedented source of the kernel function, decorators included, as
            `inspect.getsource` cuts it (`tuner.kernels.source.function_source` from a file).

    Returns:
        64 lowercase hex digits.
    """
    return hashlib.sha256(source.encode("utf-8")).hexdigest()
