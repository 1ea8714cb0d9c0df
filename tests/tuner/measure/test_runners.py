"""The runners a sweep measures with (tuner.measure.runners): one protocol, parsed once from
the backend's name, each runner owning what differs per backend."""

import pickle

import pytest

from tests.faults import FaultyRunner
from tuner.measure.runners import (
    GpuRunner,
    InterpreterRunner,
    ReplayRunner,
    Runner,
    make_runner,
    register_runner,
    registry,
    runner_factory,
)


def test_each_backend_name_parses_into_its_runner():
    assert make_runner("cuda", device_name="NVIDIA_H200") == GpuRunner("NVIDIA_H200")
    assert make_runner(
        "interpreter", device_name="TRITON_INTERPRETER", interpreter_reps=5
    ) == InterpreterRunner("TRITON_INTERPRETER", 5)
    assert make_runner("replay", device_name="NVIDIA_H100", landscape="l.json") == ReplayRunner(
        "l.json", "NVIDIA_H100"
    )


def test_unknown_names_and_a_replay_without_landscape_are_one_line_errors():
    with pytest.raises(
        ValueError,
        match=r"unknown runner 'rocm' \(known: cuda, interpreter, "
        r"replay\)",
    ):
        make_runner("rocm", device_name="x")
    with pytest.raises(ValueError, match="the replay runner needs a landscape file"):
        make_runner("replay", device_name="x")


@pytest.mark.parametrize(
    "runner",
    [
        GpuRunner("NVIDIA_H200"),
        InterpreterRunner("TRITON_INTERPRETER"),
        ReplayRunner("l.json", "NVIDIA_H100"),
    ],
)
def test_every_runner_meets_the_protocol_and_pickles_for_spawn(runner):
    assert isinstance(runner, Runner)
    assert pickle.loads(pickle.dumps(runner)) == runner


def test_what_differs_per_backend_is_the_runners():
    gpu, cpu = GpuRunner("NVIDIA_H200"), InterpreterRunner("TRITON_INTERPRETER", reps=4)
    replay = ReplayRunner("l.json", "NVIDIA_H100")
    assert [r.default_trial_timeout_s for r in (gpu, cpu, replay)] == [300.0, 1800.0, 60.0]
    assert [r.on_gpu for r in (gpu, cpu, replay)] == [True, False, False]
    assert [r.family_environments for r in (gpu, cpu, replay)] == [True, True, False]
    assert [r.confirm_above_s for r in (gpu, cpu, replay)] == [None, 3600.0, None]
    assert [r.retime_rounds(20) for r in (gpu, cpu, replay)] == [20, 4, 20]
    assert [r.trial_model_s(512, 1024, 64) for r in (gpu, replay)] == [0.025, 0.001]
    assert cpu.trial_model_s(512, 1024, 64) == pytest.approx(0.7 + 0.1 * 5)


def test_a_registered_runner_replaces_the_name_and_wraps_the_product_one(monkeypatch):
    monkeypatch.setattr(registry, "_RUNNERS", dict(registry._RUNNERS))
    register_runner("replay", FaultyRunner.wrapping(runner_factory("replay"), sleep_s=0.5))
    runner = make_runner("replay", device_name="NVIDIA_H100", landscape="l.json")
    assert runner == FaultyRunner(ReplayRunner("l.json", "NVIDIA_H100"), sleep_s=0.5)
    assert isinstance(runner, Runner) and runner.default_trial_timeout_s == 60.0
    assert pickle.loads(pickle.dumps(runner)) == runner
