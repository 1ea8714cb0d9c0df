"""The runners a sweep measures with (tuner.measure.runners): one small protocol, parsed once
from the runner's name."""

import os
import pickle

import pytest

from tuner.measure.runners import (
    GpuRunner,
    InterpreterRunner,
    ReplayRunner,
    Runner,
    make_runner,
)

GPU, CPU = GpuRunner("NVIDIA_H200"), InterpreterRunner("TRITON_INTERPRETER", reps=4)
REPLAY = ReplayRunner("l.json", "NVIDIA_H100")


def test_each_name_parses_into_its_runner_and_unknown_ones_are_one_line_errors():
    assert make_runner("cuda", device_name="NVIDIA_H200") == GPU
    assert make_runner("interpreter", device_name="TRITON_INTERPRETER", interpreter_reps=4) == CPU
    assert make_runner("replay", device_name="NVIDIA_H100", landscape="l.json") == REPLAY
    with pytest.raises(
        ValueError, match=r"unknown runner 'rocm' \(known: cuda, interpreter, replay\)"
    ):
        make_runner("rocm", device_name="x")
    with pytest.raises(ValueError, match="the replay runner needs a landscape file"):
        make_runner("replay", device_name="x")


@pytest.mark.parametrize("runner", [GPU, CPU, REPLAY])
def test_every_runner_meets_the_protocol_and_pickles_for_spawn(runner):
    assert isinstance(runner, Runner)
    assert pickle.loads(pickle.dumps(runner)) == runner


def test_what_differs_per_runner(monkeypatch):
    assert [r.on_gpu for r in (GPU, CPU, REPLAY)] == [True, False, False]
    assert [r.retime_rounds(20) for r in (GPU, CPU, REPLAY)] == [20, 4, 20]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    GPU.pin(None)
    assert "CUDA_VISIBLE_DEVICES" not in os.environ
    GPU.pin("GPU-3")
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "GPU-3"
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    CPU.pin(None)
    assert os.environ["TRITON_INTERPRET"] == "1"
    env = CPU.environment("builtin", "dense")
    assert (env["gpu_name"], env["device_name"], env["cuda"], env["driver"]) == (
        "TRITON_INTERPRETER",
        "TRITON_INTERPRETER",
        "",
        "",
    )
    assert env["kernel_source"] == "builtin" and len(env["kernel_hash"]) > 8
