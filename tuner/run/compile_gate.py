"""The compile gate of a CUDA worker: compile each config for the GPU's architecture before it
is launched, reject what cannot launch, and precompile what the search will likely ask next,
in a process pool the worker's tasks share."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import replace
from typing import Any

from tuner.kernels.config import KernelConfig
from tuner.kernels.gpus import MAX_SHARED_BYTES
from tuner.kernels.registry import get_family
from tuner.measure.compile import (
    CompileCache,
    CompileInfo,
    CompileJob,
    compile_job,
    compile_pool,
    launch_problem,
)
from tuner.measure.runner import Problem
from tuner.measure.trial import TrialResult
from tuner.search.axes import neighbours, space_axes


class CompileGate:
    """What a CUDA worker asks before it launches a config of one task: compile it for the GPU's
    architecture (ahead of time where the search is predictable), reject it without a launch
    when it cannot run there, and precompile the neighbours of each new incumbent.

    Each compile writes the binary to Triton's cache under the key the measuring process's JIT
    computes for the same launch (`tuner.kernels.target` records the host code's launch and lets
    Triton's own launcher specialize it), so the first launch loads instead of compiling.
    Submitted configs wait in a queue, at most `slots` in the pool at once; `before` on a queued
    config sends it to the pool ahead of the queue. CompileInfo goes to the on-disk cache. The
    gate runs in the measuring thread only: finished compiles are taken in, and the pool's free
    slots filled, whenever it is asked something (and while `before` waits).

    A pool whose process died (`BrokenProcessPool`) fails every compile it held and takes no
    more (`broken`; the worker replaces it after the task). Such configs, and those cancelled
    by a shutdown, are answered from the on-disk cache, else with a CompileInfo that rejects
    nothing, and nothing is cached: the config is launched, Triton compiles it in the measuring
    process, and a config that crashes the compiler is recorded as crashed there.

    Args:
        pool: the worker's `compile_pool`, shared by its tasks.
        slots: most compiles in the pool at once (twice its processes).
        arch: compute capability as an int (a key of MAX_SHARED_BYTES).
        problem: the task's launch (its M, shape, out_dtype and family).
        space: the task's candidates (for `likely_next`).
        first: configs the search will measure first, whatever their results (its warm
            starts, and for `grid` the space: `Strategy.planned`); queued at once, in order.
        cache: the on-disk cache; default `CompileCache(family=problem.family)`.
        ahead: how many likely-next configs to queue after each new incumbent.
    """

    def __init__(
        self,
        pool: ProcessPoolExecutor,
        *,
        slots: int,
        arch: int,
        problem: Problem,
        space: Sequence[KernelConfig],
        first: Sequence[KernelConfig] = (),
        cache: CompileCache | None = None,
        ahead: int = 8,
    ) -> None:
        self.pool, self.slots, self.arch, self.problem = pool, slots, arch, problem
        self.space, self.ahead = list(space), ahead
        self.specialization = get_family(problem.family).specialization(problem.shape, problem.M)
        self.cache = cache or CompileCache(family=problem.family)
        # The launch's key in the cache, and what its compile jobs take besides the config.
        self.where: dict[str, Any] = {"arch": arch, "specialization": self.specialization}
        self.where["out_dtype"] = problem.out_dtype
        self.launch = (problem.shape, problem.M, problem.out_dtype, problem.family)
        self.queue: dict[KernelConfig, None] = {}  # ordered set, front first
        self.in_pool: dict[KernelConfig, Future[CompileInfo]] = {}
        self.infos: dict[KernelConfig, CompileInfo] = {}  # the answers, compiled or not
        self.known: dict[KernelConfig, CompileInfo] = {}  # from the on-disk cache
        self.dispatched: list[KernelConfig] = []  # order configs entered the pool
        self.compile_s = self.wait_s = 0.0
        self.broken = False  # the pool lost a process; nothing more is sent to it
        self.best: float | None = None
        self.submit(first)

    def submit(self, configs: Iterable[KernelConfig]) -> None:
        """Queue configs for compiling behind those queued before (ones queued, compiling or
        done already are skipped)."""
        seen = self.queue.keys() | self.in_pool.keys() | self.infos.keys()
        fresh = [c for c in dict.fromkeys(configs) if c not in seen]
        self.known |= self.cache.get_many(fresh, **self.where)
        self.queue |= dict.fromkeys(fresh)
        self._pump()

    def before(self, config: KernelConfig) -> TrialResult | None:
        """Compile (or wait for) a config, ahead of the queue if needed.

        Returns:
            An out_of_resources or compile_error TrialResult to record instead of launching,
            or None when the config may be launched (its binary is in Triton's cache).
        """
        start = time.perf_counter()
        self._pump()
        if config not in self.infos and config not in self.in_pool:
            self.queue.pop(config, None)
            if config not in self.known:
                self.known |= self.cache.get_many([config], **self.where)
            self._dispatch(config)
        while config not in self.infos:
            wait(self.in_pool.values(), return_when=FIRST_COMPLETED)
            self._pump()
        self.wait_s += time.perf_counter() - start
        return launch_problem(self.infos[config])

    def after(self, config: KernelConfig, result: TrialResult) -> None:
        """Queue the neighbours of a new incumbent for compiling while the GPU measures."""
        if result.ok and (self.best is None or result.ok_latency_us < self.best):
            self.best = result.ok_latency_us
            self.submit(likely_next(config, self.space)[: self.ahead])

    def close(self) -> None:
        """Drop the queue and take in the finished compiles (a pool that lost a process shows
        as `broken`); those still in the pool finish there, their binaries in Triton's cache."""
        self.queue.clear()
        self._pump()

    def _pump(self) -> None:
        """Take in the finished compiles, then fill the pool's free slots from the queue."""
        for config in [c for c, future in self.in_pool.items() if future.done()]:
            self._take(config, self.in_pool.pop(config))
        while self.queue and len(self.in_pool) < self.slots:
            config = next(iter(self.queue))
            del self.queue[config]
            self._dispatch(config)

    def _dispatch(self, config: KernelConfig) -> None:
        """Send one compile to the pool; answer it at once if the pool is broken."""
        job = CompileJob(config, self.arch, *self.launch, need_info=config not in self.known)
        try:
            if not self.broken:
                self.in_pool[config] = self.pool.submit(compile_job, job)
                self.dispatched.append(config)
                return
        except RuntimeError:  # BrokenProcessPool, or a pool already shut down
            self.broken = True
        self._answer_without_compile(config)

    def _answer_without_compile(self, config: KernelConfig) -> None:
        """A config the pool did not compile: its cached info (only the binary is missing,
        which the launch compiles), else one with no numbers and no error, which
        `launch_problem` lets launch; nothing is cached."""
        blank = CompileInfo(
            self.arch, config, self.specialization, self.problem.out_dtype, None, None, None, 0.0
        )
        self.infos[config] = self.known.get(config) or blank

    def _take(self, config: KernelConfig, future: Future[CompileInfo]) -> None:
        """Keep a finished compile's info and cache new info; a failed future is the pool's
        failure, not the config's: nothing is cached, or the config would be rejected in
        every later task."""
        try:
            info = future.result()
        except Exception as exc:  # noqa: BLE001 - a dead process, or a compile cancelled
            self.broken = self.broken or isinstance(exc, BrokenProcessPool)
            self._answer_without_compile(config)
            return
        known = self.known.get(config)
        if known is not None and info.error is None and info.n_regs is None:
            info = replace(known, compile_s=info.compile_s)
        elif info.error is None or known is None:
            self.cache.put(info)
        self.compile_s += info.compile_s
        self.infos[config] = info


def likely_next(incumbent: KernelConfig, space: Sequence[KernelConfig]) -> list[KernelConfig]:
    """Configs a search is likely to ask for after `incumbent`, to precompile while it measures.

    Args:
        incumbent: the fastest config so far.
        space: the task's candidates.

    Returns:
        Its one-step neighbours on the ordered axes, then the two-axis diagonal ones, those of
        the space only (what `guided`'s best-first steps measure next; TPE also samples near
        the best configs).
    """
    allowed = set(space)
    axes = space_axes(space)
    singles = [c for c in neighbours(incumbent, axes) if c in allowed]
    diagonals = [c for c in neighbours(incumbent, axes, pairs=True) if c in allowed]
    return list(dict.fromkeys([*singles, *diagonals]))


class WorkerCompiler:
    """A CUDA worker's compile pool, shared by its tasks: one `CompileGate` per task.

    A pool that lost a process (`CompileGate.broken`) takes no more work; it is replaced when
    the task that saw it ends, so one dead compile process does not leave every later task
    without precompiling and pruning.
    """

    def __init__(self, workers: int, arch: int) -> None:
        self.arch, self.workers = arch, workers
        self.pool = compile_pool(workers)

    @classmethod
    def for_this_gpu(cls, workers: int) -> WorkerCompiler | None:
        """The compiler for the visible GPU, or None (with a line saying so) when its
        architecture has no known resource limits (`tuner.kernels.gpus.MAX_SHARED_BYTES`):
        pruning would then fail every task, so Triton compiles at first launch instead."""
        import torch

        major, minor = torch.cuda.get_device_capability()
        arch = 10 * major + minor
        if arch not in MAX_SHARED_BYTES:
            print(f"no precompiling for sm{arch}: its resource limits are not known", flush=True)
            return None
        return cls(workers, arch)

    def gate(self, problem: Problem, space, first) -> CompileGate:
        """A gate for one task over its candidates, `first` queued (see `CompileGate`)."""
        slots = 2 * self.workers
        return CompileGate(
            self.pool, slots=slots, arch=self.arch, problem=problem, space=space, first=first
        )

    def closed(self, gate: CompileGate, shared) -> None:
        """Close a task's gate and add its compile and wait seconds to `shared` (the worker's
        `WorkerShared`); replace the pool when it lost a process."""
        gate.close()
        shared.compile_s.value += gate.compile_s
        shared.compile_wait_s.value += gate.wait_s
        if gate.broken:
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool = compile_pool(self.workers)
