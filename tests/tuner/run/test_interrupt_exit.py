"""How a sweep ends on a signal: SIGTERM (`Terminated`, raised by the supervisor's handler)
exits 143 = 128 + SIGTERM and Ctrl-C 130 = 128 + SIGINT, in the sweep and at the CLI's top."""

from __future__ import annotations

import signal

import pytest

from tuner.cli.guard import run_guarded
from tuner.run.supervisor import Terminated, _interrupt, interrupted_exit


def test_the_sigterm_handler_raises_terminated():
    with pytest.raises(Terminated):
        _interrupt(signal.SIGTERM, None)


def test_exit_codes_of_sigterm_and_ctrl_c():
    assert interrupted_exit(Terminated()) == (143, "terminated (SIGTERM)")
    assert interrupted_exit(KeyboardInterrupt()) == (130, "interrupted")


@pytest.mark.parametrize(
    ("raised", "code", "line"),
    [
        (
            Terminated,
            143,
            "terminated (SIGTERM); finished work is stored: run the same command to resume",
        ),
        (
            KeyboardInterrupt,
            130,
            "interrupted; finished work is stored: run the same command to resume",
        ),
    ],
)
def test_an_interrupt_reaching_the_top_is_one_line(capsys, raised, code, line):
    def app():
        raise raised

    with pytest.raises(SystemExit) as exited:
        run_guarded(app)
    assert exited.value.code == code
    assert capsys.readouterr().err.splitlines() == [line]
