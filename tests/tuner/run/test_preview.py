"""The plan `tuner sweep` prints: counts, compiles and the time estimate (tuner.run.plan)."""

from db.repo import TrialTimeRow
from tuner.run.plan import SweepRequest, duration, needs_confirmation, preview_sweeps, trial_model

INTERPRETER = trial_model("interpreter")
GPU = trial_model("cuda")


def _request(**changes) -> SweepRequest:
    fields = {"device_name": "TRITON_INTERPRETER", "model": "tiny", "tp": 1, "seed": 0, "trials": 3}
    fields |= {
        "shapes": ((256, 384), (576, 256)),
        "block_shape": (128, 128),
        "m_values": (1, 16, 32),
    }
    return SweepRequest(**fields | {"strategy": "guided", "out_dtype": "bfloat16"} | changes)


def _preview(request=None, what="2 shapes", **given):
    """The plan of one sweep (`_request()` by default), new, on the interpreter, one worker."""
    given = {"model": INTERPRETER, "history": [], "stored": [0], "workers": 1} | given
    return preview_sweeps([(request or _request(), what)], **given)


def test_a_new_interpreter_plan_uses_the_stated_default():
    preview = _preview(defaults=["TP not given: 1"])
    # 0.7 s + 4 calls x 0.1 s / (512 * 1024) x N*K a trial: 0.775 s at (256, 384), 0.8125 s at
    # (576, 256); x 3 M x 3 trials.
    assert preview.lines == (
        "plan: TRITON_INTERPRETER, tiny TP 1, guided",
        "  2 shapes x 3 M: 6 task(s) x 3 trial(s) = 18 trial(s)",
        "  total: 6 task(s), 18 trial(s) to run, 1 worker(s); about 14 s of measuring (no "
        "earlier trials of TRITON_INTERPRETER in the store: default 1.1 s a trial at N=512, "
        "K=1024, M<=64, 13 s at N=5120, K=3072)",
        "  on the interpreter nothing is compiled ahead (that is a GPU's cost) and the timings "
        "are CPU timings",
        "  TP not given: 1",
    )
    assert (preview.tasks, preview.trials) == (6, 18)
    assert round(preview.estimate_s, 4) == 14.2875


def test_the_device_history_sets_the_estimate_and_stored_trials_are_left_out():
    history = [
        TrialTimeRow("dense", 256, 384, 1, 3, 2.0),
        TrialTimeRow("dense", 256, 384, 16, 3, 2.0),
    ]
    preview = _preview(history=history, stored=[9])
    # Measured 2.0 s at M=1 and M=16 of (256, 384); the model's 0.775 s at its M=32 and
    # 0.8125 s at (576, 256); x 3 trials, half of the 18 left.
    per_task = [2.0, 2.0, 0.775] + [0.8125] * 3
    assert preview.trials == 9
    assert round(preview.estimate_s, 6) == round(sum(per_task) * 3 / 2, 6)
    assert preview.lines[1].endswith("= 18 trial(s), 9 already stored")
    assert "(from 6 earlier trial(s) of TRITON_INTERPRETER in the store)" in preview.lines[2]


def test_grid_compiles_every_config_once_per_launch_specialization():
    request = _request(
        strategy="grid",
        device_name="NVIDIA_H200",
        shapes=((256, 384),),
        m_values=(1, 16, 32, 48, 7),
    )
    preview = _preview(request, "1 shapes", model=GPU, workers=2, compile_workers=7)
    # Specializations M=1, M % 16 == 0 (16, 32, 48), other (7): 3 x 1,280 configs (the default
    # is one of them).
    assert preview.lines[1] == (
        "  1 shapes x 5 M: 5 task(s) x 1280 trial(s) = 6,400 trial(s); "
        "at most 3,840 distinct compiles"
    )
    # Compiling (3,840 x 0.6 s over 14 processes) outlasts measuring (6,400 x 25 ms / 2).
    assert round(preview.estimate_s, 6) == round(3840 * 0.6 / 14, 6)
    assert preview.lines[2] == (
        "  total: 5 task(s), 6,400 trial(s) to run, 2 worker(s); about 3 min, the longer of "
        "3 min of compiling on 14 process(es) and 80 s of measuring (no earlier trials of "
        "NVIDIA_H200 in the store: default 25 ms of measuring a trial, compiles at 0.6 s each "
        "on one core, overlapped)"
    )
    assert not needs_confirmation(preview, GPU)


def test_only_long_interpreter_plans_need_confirmation():
    big = _preview(_request(trials=128, m_values=(1, 512, 1024, 2048, 4096)))
    assert big.estimate_s > 3600 and needs_confirmation(big, INTERPRETER)
    small = _preview()
    assert not needs_confirmation(small, INTERPRETER)


def test_duration():
    seconds = (40, 720, 3600 * 3.5, 86400 * 2.1)
    assert [duration(s) for s in seconds] == ["40 s", "12 min", "3.5 h", "2.1 days"]
