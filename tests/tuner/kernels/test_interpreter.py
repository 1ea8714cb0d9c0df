"""The Triton < 3.8 interpreter shim: applied exactly where it is needed, and a launch that indexes
with a scalar tensor (our K loop) computes the right value and leaves Triton as it was."""

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from tuner.kernels import interpreter
from tuner.kernels.interpreter import fix_interpreter_index


@triton.jit
def _k_tiles_kernel(out_ptr, K, BLOCK_SIZE_K: tl.constexpr):
    # The loop header of our kernels: range() over a scalar tensor calls its __index__.
    total = 0
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        total += k + 1
    tl.store(out_ptr, total)


def test_the_fix_is_applied_only_under_the_interpreter_of_an_old_triton(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    for version in ("3.8.0", "3.10rc1", "not a version"):
        monkeypatch.setattr(triton, "__version__", version)
        assert interpreter.needs_index_fix() is False
    monkeypatch.setattr(triton, "__version__", "3.6.0+git1a2b")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert interpreter.needs_index_fix() is False
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert interpreter.needs_index_fix() is True


@pytest.mark.skipif(not triton.knobs.runtime.interpret, reason="needs TRITON_INTERPRET=1")
def test_a_scalar_tensor_indexes_a_range_on_this_numpy() -> None:
    assert fix_interpreter_index() == interpreter.needs_index_fix()
    before = tl.tensor.__dict__.get("__index__")
    out = torch.zeros(1, dtype=torch.int32)
    _k_tiles_kernel[(1,)](out, 200, BLOCK_SIZE_K=64)  # 4 K-tiles: 1 + 2 + 3 + 4
    assert out.item() == 10
    assert tl.tensor.__dict__.get("__index__") is before  # the launch restored Triton's own
    # numpy >= 2.4 refuses int() of a 1-element array: the reason for the shim.
    if tuple(int(part) for part in np.__version__.split(".")[:2]) >= (2, 4):
        with pytest.raises(TypeError):
            int(np.array([3]))
