"""Compile the next candidates on the CPU while the GPU measures, and account compile seconds
against measure seconds for a sweep's summary."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from functools import partial

from tuner.kernels.config import KernelConfig
from tuner.kernels.registry import DEFAULT_FAMILY, get_family
from tuner.kernels.shape import Shape, as_block_shape
from tuner.measure.compile import CompileJob, compile_job, compile_pool
from tuner.measure.compile_cache import CompileCache
from tuner.measure.resources import CompileInfo


@dataclass(frozen=True)
class PrecompileStats:
    """What a Precompiler did.

    Attributes:
        compiled: configs compiled in the pool (not those answered without a compile because
            the pool broke or was shut down).
        cached: configs whose CompileInfo came from the on-disk cache without a compile
            needing it (their binaries were still put in Triton's cache).
        compile_s: seconds the pool processes spent compiling (overlapped with measuring).
        wait_s: seconds the caller blocked in `wait`, the compile time measuring did not hide.
    """

    compiled: int
    cached: int
    compile_s: float
    wait_s: float


class Precompiler:
    """Compiles configs of one (arch, M, N, K) specialization in a process pool ahead of use.

    On a GPU host, each compile writes the binary to Triton's cache (TRITON_CACHE_DIR is
    inherited) under the key the measuring process's JIT computes for the same launch
    (`tuner.kernels.target.bind` binds the launch as Triton's launcher does), so the first
    launch of a precompiled config loads instead of compiling. M = 1, M % 16 == 0 and other M
    are different specializations: a Precompiler serves one; tasks of
    the same shape and specialization share binaries through Triton's cache.

    Submitted configs wait in a queue and at most `2 x pool processes` are in the pool at once;
    `wait` on a queued config moves it to the front. CompileInfo (shared memory, registers,
    spills) goes to the on-disk cache.

    A pool whose process died (`BrokenProcessPool`: killed, out of memory, a crash in the
    compiler) takes no more work, and fails every compile it held, whichever config killed it.
    Such configs, and every config this Precompiler has not yet sent when it happens, are
    answered from the on-disk cache, else with a CompileInfo that knows nothing and rejects
    nothing (`unknown_info`), and nothing is cached for them: the config is launched and
    Triton compiles it in the measuring process,
    where a config that crashes the compiler is recorded as crashed by the worker's supervisor.
    `broken` says so; the owner of a shared pool replaces it. A compile cancelled by a pool
    shutdown is answered the same way.

    Args:
        arch: compute capability as an int (89, 90, ...).
        M: rows of A; only its specialization matters.
        N: rows of B.
        K: the reduction dimension.
        block_shape: [group_n, group_k].
        out_dtype: "bfloat16" or "float16".
        pool: a pool from `tuner.measure.compile.compile_pool` to share between tasks; one is
            made (and shut down by `close`) when None.
        workers: processes of the pool (made here when `pool` is None, or the size of `pool`).
        cache: the on-disk CompileInfo cache; default `CompileCache(family=family)`.
        family: the kernel family (`tuner.kernels.registry`).
        params: the family's other dimensions (`tuner.kernels.shape.Shape.params`).
    """

    def __init__(
        self,
        *,
        arch: int,
        M: int,
        N: int,
        K: int,
        block_shape: tuple[int, int] | None,
        out_dtype: str,
        pool: ProcessPoolExecutor | None = None,
        workers: int | None = None,
        cache: CompileCache | None = None,
        family: str = DEFAULT_FAMILY,
        params: tuple[tuple[str, int], ...] = (),
    ) -> None:
        self.arch, self.M, self.N, self.K = arch, M, N, K
        self.block_shape, self.out_dtype = as_block_shape(block_shape), out_dtype
        self.family, self.params = family, params
        self.specialization = get_family(family).specialization(
            Shape(N, K, self.block_shape, params), M
        )
        self._owns_pool = pool is None
        self._pool = pool if pool is not None else compile_pool(workers)
        self._slots = 2 * (workers or max(1, (os.cpu_count() or 2) - 1))
        self._cache = cache or CompileCache(family=family)
        # Re-entrant: a future that is already done runs its callback in the submitting thread.
        self._lock = threading.RLock()
        self._queue: dict[KernelConfig, None] = {}  # ordered set, front first
        self._running: dict[KernelConfig, Future[CompileInfo]] = {}
        self._done: dict[KernelConfig, CompileInfo] = {}
        self._finished_events: dict[KernelConfig, threading.Event] = {}
        self._known: dict[KernelConfig, CompileInfo] = {}
        self.dispatched: list[KernelConfig] = []  # order configs entered the pool
        self._compile_s = 0.0
        self._wait_s = 0.0
        self._cached = 0
        self._closed = False
        self._unknown = 0  # configs answered by `unknown_info`
        self.broken = False  # the pool lost a process; nothing more is sent to it

    def submit(self, configs: Iterable[KernelConfig]) -> None:
        """Queue configs for compiling, behind those queued before.

        Args:
            configs: configs to compile; ones queued, compiling or done already are skipped.
        """
        configs = list(configs)
        fresh = [
            c
            for c in dict.fromkeys(configs)
            if c not in self._known and c not in self._done and c not in self._running
        ]
        if fresh:
            self._known.update(
                self._cache.get_many(
                    fresh,
                    arch=self.arch,
                    out_dtype=self.out_dtype,
                    specialization=self.specialization,
                )
            )
        with self._lock:
            for config in configs:
                if (
                    config not in self._queue
                    and config not in self._running
                    and (config not in self._done)
                ):
                    self._queue[config] = None
            self._fill()

    def wait(self, config: KernelConfig) -> CompileInfo:
        """The CompileInfo of a config, compiling it first (ahead of the queue) if needed.

        Args:
            config: the config the caller is about to launch.

        Returns:
            What the compiler reported; a compiler failure is in its `error`.

        Raises:
            RuntimeError: the Precompiler is closed.
        """
        if self._closed:
            raise RuntimeError("the Precompiler is closed")
        start = time.perf_counter()
        with self._lock:
            if config not in self._done and config not in self._running:
                self._queue.pop(config, None)
                if config not in self._known:
                    self._known.update(
                        self._cache.get_many(
                            [config],
                            arch=self.arch,
                            out_dtype=self.out_dtype,
                            specialization=self.specialization,
                        )
                    )
                self._dispatch(config)
            finished = self._finished_events[config]
        finished.wait()
        self._wait_s += time.perf_counter() - start
        return self._done[config]

    def stats(self) -> PrecompileStats:
        """Counts and seconds so far."""
        with self._lock:
            compiled = len(self._done) - self._cached - self._unknown
            return PrecompileStats(compiled, self._cached, self._compile_s, self._wait_s)

    def close(self) -> None:
        """Drop the queue, and shut the pool down if this Precompiler made it."""
        with self._lock:
            self._closed = True
            self._queue.clear()
        if self._owns_pool:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> Precompiler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _fill(self) -> None:
        """Move queued configs into the pool while it has free slots (lock held)."""
        while self._queue and len(self._running) < self._slots and not self._closed:
            config = next(iter(self._queue))
            del self._queue[config]
            self._dispatch(config)

    def unknown_info(self, config: KernelConfig) -> CompileInfo:
        """What a config nobody compiled is answered with: no numbers, no error, so
        `launch_problem` lets it launch."""
        return CompileInfo(
            self.arch, config, self.specialization, self.out_dtype, None, None, None, 0.0
        )

    def _answer_without_compile(self, config: KernelConfig) -> None:
        """Finish a config the pool did not compile (lock held): its info from the on-disk
        cache when there is one (only the binary is missing, which the launch compiles), else
        `unknown_info`; nothing is cached."""
        known = self._known.get(config)
        self._done[config] = known if known is not None else self.unknown_info(config)
        if known is not None:
            self._cached += 1
        else:
            self._unknown += 1
        self._finished_events[config].set()

    def _dispatch(self, config: KernelConfig) -> None:
        """Send one compile to the pool (lock held); answer it at once if the pool is broken."""
        job = CompileJob(
            config,
            self.arch,
            self.M,
            self.N,
            self.K,
            self.block_shape,
            self.out_dtype,
            need_info=config not in self._known,
            family=self.family,
            params=self.params,
        )
        self._finished_events[config] = threading.Event()
        future = None
        if not self.broken:
            try:
                future = self._pool.submit(compile_job, job)
            except RuntimeError:  # BrokenProcessPool, or a pool already shut down
                self.broken = True
        if future is None:
            self._answer_without_compile(config)
            return
        self.dispatched.append(config)
        self._running[config] = future
        future.add_done_callback(partial(self._finished, config))

    def _finished(self, config: KernelConfig, future: Future[CompileInfo]) -> None:
        """Pool callback: keep the result, cache new info, refill the pool."""
        try:
            info = future.result()
        except Exception as exc:  # noqa: BLE001 - the job did not finish: nothing is known
            # compile_job returns the compiler's own errors; an exception here is the pool's
            # (a dead process fails every compile it held, a shutdown cancels the queued ones),
            # not the config's: launch it (see the class docstring), and cache nothing, or the
            # config would be rejected in every later task.
            with self._lock:
                self.broken = self.broken or isinstance(exc, BrokenProcessPool)
                self._running.pop(config, None)
                self._answer_without_compile(config)
                self._fill()
            return
        known = self._known.get(config)
        if known is not None and info.error is None and info.n_regs is None:
            info = CompileInfo(**{**known.__dict__, "compile_s": info.compile_s})
        elif info.error is None or known is None:
            self._cache.put(info)
        with self._lock:
            self._compile_s += info.compile_s
            self._cached += known is not None
            self._running.pop(config, None)
            self._done[config] = info
            self._finished_events[config].set()
            self._fill()
