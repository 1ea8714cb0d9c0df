"""The plan `tuner sweep` prints: counts and the time estimate (tuner.run.plan)."""

from db.repo import TrialTimeRow
from tuner.run.plan import SweepRequest, duration, plan_lines


def _request(**changes) -> SweepRequest:
    fields = {"device_name": "TRITON_INTERPRETER", "model": "tiny", "tp": 1, "seed": 0, "trials": 3}
    fields |= {
        "shapes": ((256, 384), (576, 256)),
        "block_shape": (128, 128),
        "m_values": (1, 16, 32),
    }
    return SweepRequest(**fields | {"strategy": "guided", "out_dtype": "bfloat16"} | changes)


def _plan(request=None, **given):
    """The plan of one sweep (`_request()` by default), new, on the interpreter, one worker."""
    given = {"runner_name": "interpreter", "reps": 3, "history": [], "stored": [0]} | given
    return plan_lines([(request or _request(), "2 shapes")], workers=1, **given)


def test_a_new_interpreter_plan_uses_the_stated_default():
    # 0.7 s + 4 calls x 0.1 s / (512 * 1024) x N*K a trial: 0.775 s at (256, 384), 0.8125 s at
    # (576, 256); x 3 M x 3 trials: 14.3 s.
    assert _plan() == [
        "plan: TRITON_INTERPRETER, tiny TP 1, guided",
        "  2 shapes x 3 M: 6 task(s) x 3 trial(s) = 18 trial(s)",
        "  total: 6 task(s), 18 trial(s) to run, 1 worker(s); about 14 s (default for a new "
        "device: no earlier trials of TRITON_INTERPRETER in the store)",
    ]
    grid = _request(strategy="grid", device_name="NVIDIA_H200", m_values=(1,))
    # grid: the whole space, 1,280 configs (the default is one of them), each 25 ms measured
    # plus a 0.6 s compile over the host's other cores.
    assert _plan(grid, runner_name="cuda")[1] == (
        "  2 shapes x 1 M: 2 task(s) x 1280 trial(s) = 2,560 trial(s)"
    )


def test_the_device_history_sets_the_estimate_and_stored_trials_are_left_out():
    history = [
        TrialTimeRow("dense", 256, 384, 1, 3, 20.0),
        TrialTimeRow("dense", 256, 384, 16, 3, 20.0),
    ]
    lines = _plan(history=history, stored=[9])
    # Measured 20 s at M=1 and M=16 of (256, 384); the default's 0.775 s at its M=32 and
    # 0.8125 s at (576, 256); x 3 trials, half of the 18 left: 65 s.
    assert lines[1].endswith("= 18 trial(s), 9 already stored")
    assert lines[2] == (
        "  total: 6 task(s), 9 trial(s) to run, 1 worker(s); about 65 s (from 6 earlier "
        "trial(s) of TRITON_INTERPRETER)"
    )


def test_duration():
    seconds = (40, 720, 3600 * 3.5, 86400 * 2.1)
    assert [duration(s) for s in seconds] == ["40 s", "12 min", "3.5 h", "2.1 days"]
