"""tuner compare's core with a fake runner and exact latencies: which kernels are timed, failed
or unavailable; the decode/prefill verdicts; vLLM's default kernel (the table per shape) and
the verdict on `--linear-backend triton` against it. The kernels it times, on the CPU: our
Triton kernel under the interpreter, the torch stand-in and, through the stand-in vLLM, vLLM's
Marlin class (weights processed before any timed region, only apply_weights timed) checked
against the float64 reference by one runner."""

from __future__ import annotations

import importlib

import pytest
import torch

from tests.standin_vllm import CAPABILITY_VARIABLE, build_standin, importable
from tuner.compare.backends import CandidateRunner, LayerKernel, library_kernels
from tuner.compare.versus import (
    TORCH_CPU,
    TORCH_SCALED_MM,
    TRITON_DEFAULT,
    TRITON_TUNED,
    VLLM_MARLIN,
    BackendTime,
    Candidate,
    ComparePoint,
    compare_point,
    flag_lines,
)
from tuner.core import ComparisonStatus, TrialStatus
from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.space import default_config
from tuner.measure.runner import Problem
from tuner.measure.trial import TrialResult

DEFAULT = default_config()
TUNED = KernelConfig(16, 64, 128, 1, 4, 3)
OK, FAILED, UNAVAILABLE = ComparisonStatus
CAPTURING = "operation not permitted when stream is capturing"
MARLIN = "MarlinFP8ScaledMMLinearKernel"


class FakeRunner:
    """Fixed samples per candidate; `broken` candidates fail their check, `uncapturable` ones
    raise when sampled."""

    def __init__(self, samples, broken=(), uncapturable=()) -> None:
        self.samples = {name: list(values) for name, values in samples.items()}
        self.broken, self.uncapturable = broken, uncapturable
        self.checked: list[str] = []
        self.sampled: list[str] = []

    def check(self, candidate: Candidate) -> TrialResult:
        self.checked.append(candidate.backend)
        if candidate.backend in self.broken:
            return TrialResult(TrialStatus.WRONG_RESULT, error="relative error 0.5 >= 0.01")
        return TrialResult(TrialStatus.OK, rel_error=0.001)

    def sample_us(self, candidate: Candidate) -> float:
        if candidate.backend in self.uncapturable:
            raise RuntimeError(CAPTURING)
        self.sampled.append(candidate.backend)
        return self.samples[candidate.backend].pop(0)


def _compare(runner, candidates, unavailable=None, rounds=3):
    return compare_point((5120, 3072, 16), runner, candidates, unavailable or {}, rounds=rounds)


def test_kernels_are_checked_then_timed_interleaved() -> None:
    samples = {TRITON_TUNED: [10.0, 12.0, 11.0], TRITON_DEFAULT: [20.0, 22.0, 21.0]}
    runner = FakeRunner(samples, broken={TORCH_SCALED_MM})
    candidates = [
        Candidate(TRITON_TUNED, TUNED),
        Candidate(TRITON_DEFAULT, DEFAULT),
        Candidate(TORCH_SCALED_MM),
    ]
    point = _compare(runner, candidates, {VLLM_MARLIN: "not wired"})
    assert runner.checked == [TRITON_TUNED, TRITON_DEFAULT, TORCH_SCALED_MM]
    # One sample of each per round (the order: tests/tuner/measure/test_noise.py).
    assert sorted(runner.sampled) == [TRITON_DEFAULT] * 3 + [TRITON_TUNED] * 3
    assert [(t.backend, t.status, t.latency_us, t.note) for t in point.times] == [
        (TRITON_TUNED, OK, 11.0, "16x64x128 g1 w4 s3"),
        (TRITON_DEFAULT, OK, 21.0, "64x128x128 g32 w4 s2"),
        (TORCH_SCALED_MM, FAILED, None, "wrong_result: relative error 0.5 >= 0.01"),
        (VLLM_MARLIN, UNAVAILABLE, None, "not wired"),
    ]
    assert (point.N, point.K, point.M) == (5120, 3072, 16)


def test_a_tuned_config_that_is_the_default_is_timed_once() -> None:
    runner = FakeRunner({TRITON_DEFAULT: [20.0, 30.0]})
    point = _compare(
        runner, [Candidate(TRITON_TUNED, DEFAULT), Candidate(TRITON_DEFAULT, DEFAULT)], rounds=2
    )
    assert runner.checked == [TRITON_DEFAULT]
    assert point.latency(TRITON_TUNED) == point.latency(TRITON_DEFAULT) == 25.0


def test_a_kernel_that_checks_but_cannot_be_timed_fails_and_the_others_are_timed() -> None:
    runner = FakeRunner({TRITON_TUNED: [10.0, 12.0, 14.0, 16.0]}, uncapturable={VLLM_MARLIN})
    point = _compare(runner, [Candidate(TRITON_TUNED, TUNED), Candidate(VLLM_MARLIN)], rounds=2)
    # Interleaved: tuned's first sample, then marlin raised; tuned alone then takes 2 more.
    assert [(t.backend, t.status, t.latency_us, t.note) for t in point.times] == [
        (TRITON_TUNED, OK, 13.0, "16x64x128 g1 w4 s3"),
        (VLLM_MARLIN, FAILED, None, f"timing: RuntimeError: {CAPTURING}"),
    ]


def _point(M: int, N: int = 1, **latency: float | None) -> ComparePoint:
    names = {
        "tuned": TRITON_TUNED,
        "default": TRITON_DEFAULT,
        "torch": TORCH_SCALED_MM,
        "marlin": VLLM_MARLIN,
    }
    return ComparePoint(
        N,
        128,
        M,
        tuple(
            BackendTime(names[k], OK, v) if v is not None else BackendTime(names[k], UNAVAILABLE)
            for k, v in latency.items()
        ),
    )


def test_the_flag_against_vllms_default_per_m_and_for_decode_and_prefill() -> None:
    points = [
        _point(1, N=256, tuned=10.0, marlin=12.5),
        _point(1, N=576, tuned=10.0, marlin=20.0),  # 1.25x and 2x
        _point(512, N=256, tuned=50.0, marlin=50.0),
        _point(512, N=576, tuned=40.0, marlin=None),
        _point(2048, N=256, tuned=100.0, marlin=80.0),
        _point(2048, N=576, tuned=200.0, marlin=160.0),
    ]
    defaults = {(256, 128): MARLIN, (576, 128): MARLIN}
    assert flag_lines(points, defaults) == [
        "vLLM's default here: MarlinFP8ScaledMMLinearKernel (timed as vllm-marlin; from the "
        "tuner's table of vLLM 0.33.0). --linear-backend triton with the tuned files vs it, per "
        "M (geometric mean over shapes):",
        "  M=1: Triton beats vllm-marlin by 58.1% (vllm-marlin takes 1.58x)",  # sqrt(1.25 * 2)
        "  M=512: Triton and vllm-marlin tie",
        "  M=2048: vllm-marlin beats Triton by 25.0% (Triton takes 1.25x)",
        "--linear-backend triton, decode (M <= 32): Triton beats vllm-marlin by 58.1% "
        "(vllm-marlin takes 1.58x) over 2 point(s)",
        "--linear-backend triton, prefill (M >= 2048): vllm-marlin beats Triton by 25.0% "
        "(Triton takes 1.25x) over 2 point(s)",
    ]
    one = [_point(1, N=256, tuned=10.0, marlin=None)]
    assert flag_lines(one, {(256, 128): None}) == [
        "vLLM's default kernel (not known here) was not timed here"
    ]
    assert flag_lines(one, {(256, 128): MARLIN}) == [
        "vLLM's default kernel (MarlinFP8ScaledMMLinearKernel) was not timed here"
    ]


MARLIN_MODULE = "vllm.model_executor.kernels.linear.scaled_mm.marlin"


def test_on_the_cpu_torch_passes_the_check_and_a_wrong_kernel_fails() -> None:
    """Triton and the torch stand-in checked and timed by `tuner compare` on the interpreter:
    tests/cli/test_compare_cli.py."""
    kernels, unavailable = library_kernels("cpu")
    assert list(kernels) == [TORCH_CPU]
    assert unavailable[TORCH_SCALED_MM] == "CPU run: the GPU kernels are not timed"
    problem = Problem(M=3, N=200, K=256)  # N not a multiple of 128: a partial scale block
    runner = CandidateRunner(problem, device="cpu", library=kernels, interpreter_reps=1)
    torch_cpu = runner.check(Candidate(TORCH_CPU))
    # bf16 output: within bf16 rounding of the float64 reference.
    assert torch_cpu.status is TrialStatus.OK and torch_cpu.rel_error < 5e-3

    def zeros(A, As, B, Bs, out_dtype, block_shape):
        return torch.zeros(A.shape[0], B.shape[0], dtype=out_dtype)

    runner = CandidateRunner(Problem(M=2, N=128, K=128), device="cpu", library={"z": zeros})
    wrong = runner.check(Candidate("z"))
    assert (wrong.status, wrong.rel_error) == (TrialStatus.WRONG_RESULT, 1.0)


@pytest.fixture
def standin(tmp_path, monkeypatch):
    """The stand-in vLLM on sys.path, seeing an sm89 GPU (vLLM's Marlin runs only on CUDA, and
    its VllmConfig needs a device); its modules dropped from sys.modules afterwards."""
    monkeypatch.setenv(CAPABILITY_VARIABLE, "8.9")
    with importable(build_standin(tmp_path / "site"), monkeypatch) as root:
        yield root


class _Timer:
    """A timer that checks nothing but apply_weights runs in its timed region: 2 us each."""

    def __init__(self, marlin) -> None:
        self.marlin = marlin

    def __call__(self, work) -> float:
        counts = (len(self.marlin.PROCESSED), len(self.marlin.APPLIED))
        work()
        processed, applied = len(self.marlin.PROCESSED), len(self.marlin.APPLIED)
        assert (processed, applied) == (counts[0], counts[1] + 1)
        return 2e-6


def test_marlin_processes_each_weight_copy_untimed_and_matches_the_reference(standin) -> None:
    marlin = importlib.import_module(MARLIN_MODULE)
    kernels = library_kernels("cpu")[0]
    assert isinstance(kernels[VLLM_MARLIN], LayerKernel)  # Humming's reason: test_compare_cli
    assert library_kernels("cpu", (64, 128))[1][VLLM_MARLIN] == (
        "block_shape [64, 128]: only [128, 128] is wired to MarlinFP8ScaledMMLinearKernel"
    )
    problem = Problem(M=3, N=200, K=256)
    runner = CandidateRunner(
        problem, device="cpu", library=kernels, interpreter_reps=2, timer=_Timer(marlin)
    )
    checked = runner.check(Candidate(VLLM_MARLIN))
    assert checked.status is TrialStatus.OK and checked.rel_error < 5e-3
    assert marlin.PROCESSED == [(200, 256)] and marlin.APPLIED == [(3, 256)]
    assert runner.sample_us(Candidate(VLLM_MARLIN)) == 2.0
    # The interpreter plan rotates 2 weight copies: the clone was processed before timing.
    assert len(runner.weights) == 2 and marlin.PROCESSED == [(200, 256), (200, 256)]
    # each runner gets its own layers; the library's own kernel stays unprepared
    assert (
        runner.library[VLLM_MARLIN] is not kernels[VLLM_MARLIN]
        and kernels[VLLM_MARLIN]._layers == {}
    )
