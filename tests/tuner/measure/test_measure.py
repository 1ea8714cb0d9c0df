"""The live runner on the interpreter: correctness gate, failure statuses, timing (the CUDA path
with fake graphs and clock; for real on a GPU); the runners a sweep measures with, parsed once
from the runner's name."""

import os
import pickle
from types import SimpleNamespace

import pytest
import torch
from triton.compiler.errors import CompilationError
from triton.runtime.errors import OutOfResources, PTXASError

from tuner.core import TrialStatus
from tuner.kernels.accuracy import relative_error
from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.space import default_config
from tuner.measure import noise
from tuner.measure.noise import TimingPlan, wall_timer
from tuner.measure.runner import (
    KEPT_SAMPLERS,
    REL_TOL,
    GpuRunner,
    InterpreterRunner,
    KernelRunner,
    Problem,
    ReplayRunner,
    Runner,
    classify_error,
    make_runner,
)

PROBLEM = Problem(M=5, N=192, K=256, block_shape=(128, 128), out_dtype="bfloat16")
SMALL = KernelConfig(16, 64, 64, 1, 4, 2)


def test_an_invalid_config_an_unwritten_output_or_a_launch_that_raises_is_recorded():
    runner = KernelRunner(PROBLEM, device="cpu")

    def writes_half(config, copy, out=None):  # rows 0 and 1 of M = 5
        out[:2] = runner.reference[:2].to(out.dtype)

    def boom(config, copy, out=None):
        raise RuntimeError("CUDA error: an illegal memory access\nwas encountered")

    cases = [
        (
            KernelConfig(64, 128, 256, 32, 4, 2),
            boom,
            TrialStatus.INVALID,  # never launched
            "BLOCK_SIZE_K=256 does not divide group_k=128",
        ),
        (SMALL, writes_half, TrialStatus.WRONG_RESULT, f"{3 * 192} output elements not written"),
        (
            SMALL,
            boom,
            TrialStatus.CRASHED,
            "RuntimeError: CUDA error: an illegal memory access was encountered",
        ),
    ]
    for config, launch, status, error in cases:
        runner._launch_copy = launch
        result = runner.evaluate(config)
        assert (result.status, result.error, result.latency_us) == (status, error, None)


def test_a_wrong_result_is_caught_and_fp16_output_runs():
    runner = KernelRunner(PROBLEM, device="cpu")
    runner.reference = runner.reference * 1.05  # a 5% error, as a wrong scale would give
    result = runner.evaluate(SMALL)
    assert (result.status, result.latency_us) == (TrialStatus.WRONG_RESULT, None)
    # 0.05 / 1.05 from the scaling, plus bf16 rounding of the output (below 5e-3)
    assert result.rel_error == pytest.approx(0.05 / 1.05, abs=5e-3)
    fp16 = KernelRunner(Problem(1, 64, 128, out_dtype="float16"), device="cpu")
    assert fp16.evaluate(SMALL).ok and fp16.out_dtype is torch.float16
    with pytest.raises(ValueError, match="out_dtype must be one of"):
        KernelRunner(Problem(1, 64, 128, out_dtype="float32"), device="cpu")


@pytest.mark.parametrize(
    ("exc", "status"),
    [
        (OutOfResources(300_000, 232_448, "shared memory"), TrialStatus.OUT_OF_RESOURCES),
        (PTXASError("`ptxas` raised SIGSEGV"), TrialStatus.COMPILE_ERROR),
        (CompilationError("src", None, "bad"), TrialStatus.COMPILE_ERROR),
        (RuntimeError("CUDA error: an illegal memory access"), TrialStatus.CRASHED),
    ],
)
def test_launch_failures_are_classified(exc, status):
    assert classify_error(exc) is status


TIMED = Problem(M=16, N=256, K=256)
COPY_BYTES = 256 * 256 + 2 * 2 * 4  # B [256, 256] fp8 plus Bs [2, 2] fp32


class DeviceClock:
    """A fake clock moved only by launches: a launch reading weight copy c takes durations_s[c]."""

    def __init__(self, durations_s):
        self.now, self.durations_s, self.copies, self.replaying = 0.0, durations_s, [], False

    def __call__(self):
        return self.now

    def launched(self, copy):
        self.copies.append(copy)
        self.now += self.durations_s[copy]


def test_interpreter_timing_rotates_real_weight_copies(monkeypatch):
    clock = DeviceClock([0.003, 0.005])
    runner = KernelRunner(TIMED, device="cpu", interpreter_reps=3, timer=wall_timer(clock))
    real_launch = runner._launch_copy
    outputs = []

    def launch_and_tick(config, copy, out=None):
        real_launch(config, copy, out)
        if out is None:  # a timed launch; the check writes into an output of its own
            outputs.append(runner._timed_out.clone())
            clock.launched(copy)

    monkeypatch.setattr(runner, "_launch_copy", launch_and_tick)
    result = runner.evaluate(default_config())
    assert result.ok and 0 < result.rel_error < REL_TOL and result.measure_s > 0
    assert clock.copies == [0, 1, 0]
    # samples 3000, 5000, 3000 us: p80 interpolates 60% of the way from 3000 to 5000
    assert (result.latency_us, result.p20_us, result.p80_us) == pytest.approx((3000, 3000, 4200))
    (b0, bs0), (b1, bs1) = runner.weights
    assert b1.data_ptr() != b0.data_ptr() and bs1.data_ptr() != bs0.data_ptr()
    assert torch.equal(b1.view(torch.uint8), b0.view(torch.uint8)) and torch.equal(bs1, bs0)
    for out in outputs:  # every copy gives the checked result
        assert torch.equal(out, outputs[0])
    # sample_us goes on with the rotation: copy 1, then copy 0
    assert runner.sample_us(default_config()) == pytest.approx(5000)
    assert runner.sample_us(default_config()) == pytest.approx(3000)
    assert clock.copies == [0, 1, 0, 1, 0]


class FakeGraph:
    """Stands for a captured CUDA graph: replay runs the captured launches again."""

    def __init__(self, clock, launches):
        self.clock, self.launches = clock, list(launches)

    def replay(self):
        self.clock.replaying = True
        for launch in self.launches:
            launch()
        self.clock.replaying = False


def test_cuda_path_plan_graphs_and_per_launch_time(monkeypatch):
    """The CUDA orchestration on the CPU: the device, graphs and events are fakes."""
    d = 2**-12  # 244.140625 us per launch of copies 0-4; copies 5-9 take twice as long
    clock = DeviceClock([d] * 5 + [2 * d] * 5)
    captured = []

    def capture(launches):
        clock.now += 1.0  # capturing takes long; it is never inside a timed region
        captured.append(FakeGraph(clock, launches))
        return captured[-1]

    monkeypatch.setattr(noise, "capture_graph", capture)
    monkeypatch.setattr(
        torch.cuda,
        "get_device_properties",
        lambda device: SimpleNamespace(L2_cache_size=4 * COPY_BYTES),
    )
    runner = KernelRunner(TIMED, device="cpu", warmup_s=0.003, rep_s=0.01, timer=wall_timer(clock))

    def launch(config, copy):
        if not clock.replaying:
            clock.now += 10 * d  # an eager launch: the CPU's launch cost, far above the kernel
        clock.launched(copy)

    monkeypatch.setattr(runner, "_launch_copy", launch)
    sampler = runner._build_cuda(default_config())
    # 8 copies hold 2x L2; the estimate (one eager launch, then a graph of 5 launches replayed
    # once untimed and once timed, all d: the eager launches' CPU cost is not in it) gives
    # ceil(1 ms / d) = 5 launches per graph, so the copies round up to 10, in 2 graphs
    assert clock.copies == [0, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4]
    assert sampler.plan == TimingPlan(copies=10, launches=5, warmup=3, samples=10)
    assert len(runner.weights) == 10
    probe, *graphs = captured
    assert len(probe.launches) == 5
    for graph, expected in zip(graphs, ([0, 1, 2, 3, 4], [5, 6, 7, 8, 9]), strict=True):
        del clock.copies[:]
        graph.replay()
        assert clock.copies == expected
    runner._samplers[default_config()] = sampler
    sampler.warm()  # graphs 0, 1, 0; the samples start with graph 1
    median_us, p20_us, p80_us = runner.time_us(default_config())
    # five samples of each graph: d and 2d per launch
    assert (median_us, p20_us, p80_us) == (1.5 * d * 1e6, d * 1e6, 2 * d * 1e6)
    assert runner.sample_us(default_config()) == 2 * d * 1e6


def test_samplers_are_kept_for_the_last_configs_only(monkeypatch):
    clock = DeviceClock([0.001, 0.002])
    runner = KernelRunner(TIMED, device="cpu", timer=wall_timer(clock))
    monkeypatch.setattr(runner, "_launch_copy", lambda config, copy: clock.launched(copy))
    configs = [KernelConfig(16, 64, 64, group, 4, 2) for group in range(1, KEPT_SAMPLERS + 2)]
    assert [runner.sample_us(config) for config in configs] == pytest.approx(
        [1000.0] * len(configs)
    )  # each new config starts at copy 0
    assert list(runner._samplers) == configs[1:]
    assert runner.sample_us(configs[1]) == pytest.approx(2000.0)  # kept: goes on with copy 1
    assert runner.sample_us(configs[0]) == pytest.approx(1000.0)  # dropped: starts again
    assert list(runner._samplers) == [*configs[3:], configs[1], configs[0]]  # 2 was oldest


ON_GPU = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") == "1" or not torch.cuda.is_available(),
    reason="needs a CUDA GPU and TRITON_INTERPRET=0 (bench/gpu_check.sh runs it)",
)


@ON_GPU
@pytest.mark.parametrize("M", [1, 16, 100])
def test_graph_replays_on_a_gpu_write_the_right_result_into_every_copy(M):
    """The CUDA path for real: captured graphs over rotated weight copies compute the GEMM."""
    runner = KernelRunner(
        Problem(M=M, N=512, K=384), device="cuda", seed=2, warmup_s=0.002, rep_s=0.01
    )
    result = runner.evaluate(default_config())
    assert result.status is TrialStatus.OK, result.error
    assert 0 < result.p20_us <= result.latency_us <= result.p80_us
    assert len(runner.weights) >= 2
    for B, Bs in runner.weights:  # the copies equal the weight they were cloned from
        assert torch.equal(B, runner.weights[0][0]) and torch.equal(Bs, runner.weights[0][1])
    runner._timed_out.fill_(float("nan"))
    torch.cuda.synchronize()  # the replays run on the runner's own stream
    assert runner.sample_us(default_config()) > 0  # one more replay of a kept graph
    torch.cuda.synchronize()
    assert relative_error(runner._timed_out, runner.reference) < REL_TOL


GPU, CPU = GpuRunner("NVIDIA_H200"), InterpreterRunner("TRITON_INTERPRETER", reps=4)
REPLAY = ReplayRunner("l.json", "NVIDIA_H100")


def test_each_name_parses_into_its_runner_which_pickles_for_spawn():
    assert make_runner("cuda", device_name="NVIDIA_H200") == GPU
    assert make_runner("interpreter", device_name="TRITON_INTERPRETER", interpreter_reps=4) == CPU
    assert make_runner("replay", device_name="NVIDIA_H100", landscape="l.json") == REPLAY
    for runner in (GPU, CPU, REPLAY):
        assert isinstance(runner, Runner) and pickle.loads(pickle.dumps(runner)) == runner


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
