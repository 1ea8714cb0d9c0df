"""Triton 3.6's CPU interpreter under numpy >= 2.4: the one compatibility shim, interpreter only.

Triton 3.6's interpreter turns a scalar tensor into a Python index with
`int(self.handle.data)` on a 1-element array (`triton/runtime/interpreter.py`,
`_patch_lang_tensor`), which numpy >= 2.4 refuses ("only 0-dimensional arrays can be converted
to Python scalars"; numpy 2.3 only warned). Every launch of our kernels then fails at
`for k in range(0, tl.cdiv(K, BLOCK_SIZE_K))`. Triton's own fix squeezes the array first
(triton-lang/triton issue #9171; Triton 3.8's interpreter has
`int(self.handle.data.squeeze())`). A host with Triton 3.6 and numpy 2.5 (as our GPU check
host) needs this.

Decided here, and why: the kernels keep vLLM's loop structure and so compile to vLLM's code
(bench/moe_fidelity.py); numpy cannot be capped for Triton < 3.8 alone (a requirement cannot
depend on another package's version), and a cap for everyone would fight the GPU machine's
numpy. So the host wrappers call `fix_interpreter_index()` before a launch; it changes nothing
unless TRITON_INTERPRET=1 and Triton is older than 3.8, and then wraps one interpreter function
so that the `__index__` it installs for the launch squeezes the array, as Triton 3.8's does.
Compiled (GPU) code is untouched: the compiler never runs this path.
"""

from __future__ import annotations

import functools

import triton

from tuner.core import minor_of

# First Triton release whose interpreter squeezes before int() (checked in the 3.8.0 wheel's
# triton/runtime/interpreter.py).
FIXED_IN = (3, 8)


def needs_index_fix() -> bool:
    """Whether launches in this process run on an interpreter that calls int() unsqueezed:
    Triton's own reading of TRITON_INTERPRET ("1", "true", ...), as triton.jit uses it, and a
    Triton older than `FIXED_IN` (`tuner.core.minor_of` of its version)."""
    interpreted = bool(triton.knobs.runtime.interpret)
    return interpreted and (minor_of(triton.__version__) or FIXED_IN) < FIXED_IN


def fix_interpreter_index() -> bool:
    """Make Triton < 3.8's interpreter squeeze a scalar before int(), once per process.

    `triton.runtime.interpreter._patch_lang` calls `_patch_lang_tensor(tensor, scope)` at every
    launch to install `tl.tensor.__index__` (and restores it afterwards through the scope); the
    wrapper installed here (`_squeeze_index`, once) calls the original and then sets
    `__index__` to `int(data.squeeze())` through the same scope, so the restore order stays
    right.

    Returns:
        True if the interpreter needs the fix (it is in place after the call), False otherwise
        (nothing was changed).
    """
    if needs_index_fix():
        _squeeze_index()
        return True
    return False


@functools.cache
def _squeeze_index() -> None:
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor

    def patch_lang_tensor(tensor, scope) -> None:
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

    interpreter._patch_lang_tensor = patch_lang_tensor
