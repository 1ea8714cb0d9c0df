"""The compile gate when its pool fails: a dead compile process or a shutdown never hangs a wait,
rejects a config or poisons the cache; the worker replaces a broken pool. Fake pools, no Triton."""

import multiprocessing as mp
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from dataclasses import replace

import pytest
import torch

from tuner.core import TrialStatus
from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.space import vllm_space
from tuner.measure import compile as compile_module
from tuner.measure.compile import CompileCache, CompileInfo
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

    def submit(self, fn, job):
        if self.dead:
            raise BrokenProcessPool(
                "A child process terminated abruptly, the process pool is not usable anymore"
            )
        self.jobs.append(job.config)
        self.futures.append(Future())
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


def make_gate(pool, cache, first):
    """A gate of two slots for sm90 over vLLM's space at PROBLEM's launch."""
    return CompileGate(
        pool, slots=2, arch=90, problem=PROBLEM, space=vllm_space(), first=first, cache=cache
    )


def unknown(config):
    return CompileInfo(
        90, config, "M=any,N=d16,K=d16,gn=d16,gk=d16,kg=any", "float16", None, None, None, 0.0
    )


def test_a_dead_compile_process_answers_every_wait_without_rejecting(tmp_path):
    cache = CompileCache(tmp_path)
    too_big = replace(unknown(CONFIGS[3]), shared_bytes=300_000, n_regs=128, spill_bytes=0)
    cache.put(too_big)  # known from an earlier run: its numbers still count
    pool = FakePool()
    gate = make_gate(pool, cache, CONFIGS)  # 2 slots: configs 0 and 1 go to the pool, 2 and 3 wait
    assert pool.jobs == CONFIGS[:2]
    pool.die()
    results = [gate.before(config) for config in CONFIGS]  # returns at once, nothing hangs
    assert gate.broken
    # the cached numbers for the config the cache knows, a blank for the others
    infos = [gate.infos[config] for config in CONFIGS]
    assert infos == [*map(unknown, CONFIGS[:3]), too_big]
    assert results[:3] == [None] * 3  # launched, not rejected
    assert gate.before(KernelConfig(64, 64, 64, 1, 4, 2)) is None  # never queued: launched too
    assert results[3].status is TrialStatus.OUT_OF_RESOURCES
    assert pool.jobs == CONFIGS[:2] and gate.dispatched == CONFIGS[:2]
    # nothing was cached for the configs the pool failed
    got = cache.get_many(CONFIGS, arch=90, specialization=gate.specialization, out_dtype="float16")
    assert list(got) == [CONFIGS[3]]
    assert gate.compile_s == 0.0


def test_a_cancelled_compile_is_not_cached_as_a_compile_error(tmp_path):
    cache = CompileCache(tmp_path)
    pool = FakePool()
    gate = make_gate(pool, cache, CONFIGS[:1])
    pool.futures[0].cancel()  # what shutdown(cancel_futures=True) does to a queued compile
    assert gate.before(CONFIGS[0]) is None
    assert gate.infos[CONFIGS[0]] == unknown(CONFIGS[0])
    assert not gate.broken
    got = cache.get_many(CONFIGS, arch=90, specialization=gate.specialization, out_dtype="float16")
    assert got == {}


def test_the_worker_replaces_a_broken_pool_after_the_task(tmp_path, monkeypatch):
    pools = []

    def make_pool(workers=None):
        pools.append(FakePool())
        return pools[-1]

    monkeypatch.setattr(compile_gate, "compile_pool", make_pool)
    monkeypatch.setenv("TUNER_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (10, 3))
    assert WorkerCompiler.for_this_gpu(2) is None  # sm103: no known limits, no pruning
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    compiler = WorkerCompiler.for_this_gpu(2)
    assert compiler.arch == 90 and compiler.pool is pools[0]
    gate, shared = compiler.gate(PROBLEM, vllm_space(), CONFIGS[:1]), WorkerShared(mp)
    compiler.closed(gate, shared)
    assert compiler.pool is pools[0] and len(pools) == 1  # a healthy pool is kept
    gate = compiler.gate(PROBLEM, vllm_space(), CONFIGS[:1])
    pools[0].die()
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
