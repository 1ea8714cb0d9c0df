"""`tuner verify` and `tuner compare` on the interpreter switch Triton to it before any kernel is
imported, and refuses a process where a registered family's kernel was loaded for a GPU."""

import os
import sys
import types

import pytest
import typer

from tuner.cli.devices import use_runner
from tuner.kernels.registry import FAMILIES
from tuner.measure.runner import InterpreterRunner

INTERPRETER = InterpreterRunner("TRITON_INTERPRETER")


@pytest.mark.parametrize("family", [*sorted(FAMILIES), None])
def test_interpreter_is_switched_on_unless_a_family_kernel_was_loaded(family, monkeypatch, capsys):
    """family None: no kernel loaded yet, so the interpreter is switched on."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    for other in FAMILIES.values():
        monkeypatch.delitem(sys.modules, other.kernel_module, raising=False)
    if family is None:
        use_runner(INTERPRETER, [None])
        assert os.environ["TRITON_INTERPRET"] == "1"
        return
    monkeypatch.setitem(sys.modules, FAMILIES[family].kernel_module, types.ModuleType("stub"))
    with pytest.raises(typer.Exit) as raised:
        use_runner(INTERPRETER, [None])
    assert raised.value.exit_code == 2
    assert "the kernel was already loaded for a GPU in this process" in capsys.readouterr().err
    assert os.environ["TRITON_INTERPRET"] == "0"
