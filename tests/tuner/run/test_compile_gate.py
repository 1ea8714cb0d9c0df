"""The compile gate when its pool fails or the search asks what was not sent: a dead compile
process or a cancelled compile never hangs a wait or rejects a config; a config asked first
jumps the compiles still waiting; the worker replaces a broken pool. Fake pools, no Triton."""

import multiprocessing as mp
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool

import pytest
import torch

from tuner.core import TrialStatus
from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.space import vllm_space
from tuner.measure import compile as compile_module
from tuner.measure.compile import CompileInfo
from tuner.measure.runner import Problem
from tuner.run import compile_gate
from tuner.run.compile_gate import CompileGate, WorkerCompiler
from tuner.run.worker import WorkerShared

PROBLEM = Problem(33, 512, 256, (128, 128), "float16")
CONFIGS = [
    KernelConfig(16, 32, 64, 1, 4, 2),
    KernelConfig(16, 64, 64, 1, 4, 2),
    KernelConfig(32, 32, 64, 1, 4, 2),
    KernelConfig(32, 64, 64, 1, 4, 2),
]


class FakePool:
    """Stands for a ProcessPoolExecutor: submit returns a pending future the test settles; after
    `die`, submit raises as a broken ProcessPoolExecutor does."""

    def __init__(self):
        self.jobs, self.futures, self.dead = [], [], False
        self.shut_down = False
        self.answers = {}  # config -> the CompileInfo its compile returns at once

    def submit(self, fn, job):
        if self.dead:
            raise BrokenProcessPool(
                "A child process terminated abruptly, the process pool is not usable anymore"
            )
        self.jobs.append(job.config)
        self.futures.append(Future())
        if job.config in self.answers:
            self.futures[-1].set_result(self.answers[job.config])
        return self.futures[-1]

    def die(self):
        """A compile process is killed: every compile the pool held fails."""
        self.dead = True
        for future in self.futures:
            if not future.done():
                future.set_exception(
                    BrokenProcessPool("A process in the process pool was terminated abruptly")
                )

    def shutdown(self, wait=True, cancel_futures=False):
        self.shut_down = True


def make_gate(pool, first):
    """A gate for sm90 over vLLM's space at PROBLEM's launch."""
    return CompileGate(pool, arch=90, problem=PROBLEM, space=vllm_space(), first=first)


def test_a_dead_or_cancelled_compile_is_launched_not_rejected():
    pool = FakePool()
    gate = make_gate(pool, CONFIGS[:2])
    pool.futures[0].cancel()  # what shutdown(cancel_futures=True) does to a waiting compile
    assert gate.before(CONFIGS[0]) is None and not gate.broken
    pool.die()
    assert [gate.before(config) for config in CONFIGS] == [None] * 4  # at once, nothing hangs
    assert gate.broken and pool.jobs == CONFIGS[:2]  # nothing more was sent
    assert gate.compile_s == 0.0


def test_a_config_asked_first_jumps_the_compiles_still_waiting_and_is_rejected_unlaunched():
    pool = FakePool()
    gate = make_gate(pool, CONFIGS[:3])
    pool.futures[0].set_running_or_notify_cancel()  # compiling: it cannot be cancelled
    pool.answers[CONFIGS[3]] = CompileInfo(90, CONFIGS[3], 300_000, 32, 0, 0.5)
    result = gate.before(CONFIGS[3])
    assert result.status is TrialStatus.OUT_OF_RESOURCES and result.measure_s == 0.0
    assert pool.jobs == [*CONFIGS[:3], CONFIGS[3], *CONFIGS[1:3]]
    assert list(gate.futures) == [CONFIGS[0], CONFIGS[3], *CONFIGS[1:3]]
    assert [future.cancelled() for future in pool.futures[1:3]] == [True, True]
    assert gate.compile_s == 0.5


def test_the_worker_replaces_a_broken_pool_after_the_task(tmp_path, monkeypatch):
    pools = []

    def make_pool(workers=None):
        pools.append(FakePool())
        return pools[-1]

    monkeypatch.setattr(compile_gate, "compile_pool", make_pool)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (10, 3))
    assert WorkerCompiler.for_this_gpu(2) is None  # sm103: no known limits, no pruning
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    compiler = WorkerCompiler.for_this_gpu(2)
    assert compiler.arch == 90 and compiler.pool is pools[0]
    gate, shared = compiler.gate(PROBLEM, vllm_space(), CONFIGS[:1]), WorkerShared(mp)
    compiler.closed(gate, shared)
    assert compiler.pool is pools[0] and len(pools) == 1  # a healthy pool is kept
    assert pools[0].futures[0].cancelled()  # the task's compiles still waiting are dropped
    gate = compiler.gate(PROBLEM, vllm_space(), CONFIGS[:1])
    pools[0].die()
    assert gate.before(CONFIGS[0]) is None
    compiler.closed(gate, shared)
    assert pools[0].shut_down and compiler.pool is pools[1]  # the next task gets a new one


@pytest.fixture(autouse=True)
def _no_real_pool(monkeypatch):
    """Fail loudly if a test would start real compile processes."""
    monkeypatch.setattr(
        compile_module.ProcessPoolExecutor,
        "__init__",
        lambda *a, **k: pytest.fail("a real pool was made"),
    )
