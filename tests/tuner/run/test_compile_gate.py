"""A CUDA worker's compile pool when it fails or the search asks what was not sent: a dead
compile process or a cancelled compile never hangs a wait or rejects a config; a config asked
first jumps the compiles still waiting; a broken pool is replaced after the task. Fake pools,
no Triton."""

import multiprocessing as mp
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool

import pytest
import torch

from tuner.core import TrialStatus
from tuner.kernels.config import KernelConfig
from tuner.measure import compile as compile_module
from tuner.measure.compile import CompileInfo
from tuner.measure.runner import Problem
from tuner.run import worker
from tuner.run.worker import CompileAhead, WorkerShared

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

    def __init__(self, workers=None):
        self.jobs, self.futures, self.dead = [], [], False
        self.shut_down = False
        self.answers = {}  # config -> the CompileInfo its compile returns at once

    def submit(self, fn, job):
        if self.dead:
            raise BrokenProcessPool("A child process terminated abruptly")
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
                future.set_exception(BrokenProcessPool("A process was terminated abruptly"))

    def shutdown(self, wait=True, cancel_futures=False):
        self.shut_down = True


@pytest.fixture
def pools(monkeypatch):
    made = []

    def make_pool(workers=None):
        made.append(FakePool())
        return made[-1]

    monkeypatch.setattr(worker, "compile_pool", make_pool)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (10, 3))
    assert CompileAhead.for_this_gpu(2, WorkerShared(mp)) is None  # sm103: no known limits
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    return made


def test_a_dead_or_cancelled_compile_is_launched_and_the_pool_replaced_after_the_task(pools):
    compiler = CompileAhead.for_this_gpu(2, WorkerShared(mp))
    assert compiler.arch == 90 and compiler.pool is pools[0]
    compiler.start(PROBLEM, CONFIGS[:2])
    pools[0].futures[0].cancel()  # what shutdown(cancel_futures=True) does to a waiting compile
    pools[0].die()
    assert [compiler.check(config) for config in CONFIGS] == [None] * 4  # at once, no hang
    assert compiler.broken and pools[0].jobs == CONFIGS[:2]  # nothing more was sent
    compiler.end()
    assert pools[0].shut_down and compiler.pool is pools[1] and not compiler.broken
    compiler.start(PROBLEM, CONFIGS[:1])
    compiler.end()
    assert compiler.pool is pools[1] and pools[1].futures[0].cancelled()  # a healthy pool kept


def test_a_config_asked_first_jumps_the_compiles_still_waiting_and_is_rejected_unlaunched(pools):
    shared = WorkerShared(mp)
    compiler = CompileAhead.for_this_gpu(2, shared)
    compiler.start(PROBLEM, CONFIGS[:3])
    pool = pools[0]
    pool.futures[0].set_running_or_notify_cancel()  # compiling: it cannot be cancelled
    pool.answers[CONFIGS[3]] = CompileInfo(90, CONFIGS[3], 300_000, 32, 0, 0.5)
    result = compiler.check(CONFIGS[3])
    assert result.status is TrialStatus.OUT_OF_RESOURCES and result.measure_s == 0.0
    assert [future.cancelled() for future in pool.futures[:3]] == [False, True, True]
    pool.answers[CONFIGS[1]] = CompileInfo(90, CONFIGS[1], 1000, 32, 0, 0.25)
    assert compiler.check(CONFIGS[1]) is None  # cancelled: sent again when asked
    assert pool.jobs == [*CONFIGS[:3], CONFIGS[3], CONFIGS[1]]
    assert shared.compile_s.value == 0.75


@pytest.fixture(autouse=True)
def _no_real_pool(monkeypatch):
    """Fail loudly if a test would start real compile processes."""
    monkeypatch.setattr(
        compile_module.ProcessPoolExecutor,
        "__init__",
        lambda *a, **k: pytest.fail("a real pool was made"),
    )
