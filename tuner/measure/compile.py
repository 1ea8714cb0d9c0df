"""Compile-for-target pruning: each config's shared memory, registers and spills from the
compiler, cached on disk, and the configs that cannot launch on an architecture, before any GPU
time is spent."""

from __future__ import annotations

import contextlib
import io
import multiprocessing as mp
import os
import re
import threading
import time
import warnings
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from tuner.core import OUT_DTYPES
from tuner.kernels.config import KernelConfig
from tuner.kernels.registry import DEFAULT_FAMILY, get_family
from tuner.kernels.shape import Shape, as_block_shape
from tuner.measure.compile_cache import CompileCache
from tuner.measure.resources import MAX_SHARED_BYTES, CompileInfo, Rejection, launch_problem

# torch and triton are imported only inside the compile pool's processes, after TRITON_INTERPRET
# is cleared there: a process in which Triton's interpreter ran cannot generate code any more.


# Triton variables a pool process sets to read ptxas's log (see `_child_init`).
_LOG_VARIABLES = ("TRITON_DUMP_PTXAS_LOG", "TRITON_ALWAYS_COMPILE")
_PTXAS_REGISTERS = re.compile(r"Used (\d+) registers")
_PTXAS_SPILLS = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")


@dataclass(frozen=True)
class CompileJob:
    """One compile for the pool: a config, its target and the launch it must match."""

    config: KernelConfig
    arch: int
    M: int
    N: int
    K: int
    block_shape: tuple[int, int] | None
    out_dtype: str
    need_info: bool = True
    family: str = DEFAULT_FAMILY
    params: tuple[tuple[str, int], ...] = ()

    @property
    def shape(self) -> Shape:
        """The compiled problem apart from M."""
        return Shape(self.N, self.K, as_block_shape(self.block_shape), self.params)


def _exit_with_parent(parent_pid: int) -> None:
    """End this pool process when its parent is gone (a worker killed with SIGKILL cannot shut
    its pool down, and an orphan compiler would keep a CPU busy)."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()


def _child_init() -> None:
    """Runs first in every pool process: no interpreter, quiet Triton, ptxas's log when safe.

    TRITON_DUMP_PTXAS_LOG makes Triton print ptxas's `-v` log (registers, spills) and
    TRITON_ALWAYS_COMPILE makes it compile (and log) even when its cache has the binary. Each is
    used only when it is not part of the installed Triton's cache key
    (`get_cache_invalidating_env_vars`; neither is on Triton 3.6 or 3.9), so the binaries land
    under the key the measuring process computes.
    """
    os.environ.pop("TRITON_INTERPRET", None)
    _exit_with_parent(os.getppid())
    warnings.filterwarnings("ignore", message="TRITON_DEFAULT_FP_FUSION is unset")
    for name in _LOG_VARIABLES:
        os.environ[name] = "1"
    keyed = _cache_key_variables()
    for name in _LOG_VARIABLES:
        if name in keyed:
            del os.environ[name]
    if "TRITON_ALWAYS_COMPILE" in os.environ:
        os.environ["TRITON_ALWAYS_COMPILE"] = "0"  # switched on per job by `compile_job`


def _cache_key_variables() -> set[str]:
    """Names of the set environment variables that enter Triton's cache key (all of ours when
    the installed Triton cannot tell)."""
    try:
        from triton._C.libtriton import get_cache_invalidating_env_vars
    except ImportError:
        return set(_LOG_VARIABLES)
    return set(get_cache_invalidating_env_vars())


def compile_job(job: CompileJob) -> CompileInfo:
    """Compile one config for its target (in a pool process) and read what the compiler says.

    The binary lands in Triton's cache (TRITON_CACHE_DIR, inherited from the parent) under the
    key a launch with the same config and specialization computes.

    Args:
        job: the config, target and launch to compile for.

    Returns:
        The CompileInfo; a compiler error is returned in `error`, not raised.
    """
    import torch

    family = get_family(job.family)
    out_dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16}[job.out_dtype]
    # TRITON_ALWAYS_COMPILE: compile (and so log) even when Triton's cache has the binary, which
    # it then stores again; without `need_info` a cached binary is enough.
    if "TRITON_ALWAYS_COMPILE" in os.environ:
        os.environ["TRITON_ALWAYS_COMPILE"] = "1" if job.need_info else "0"
    log = io.StringIO()
    start = time.perf_counter()
    shared = registers = spills = error = None
    try:
        with contextlib.redirect_stdout(log):
            kernel = family.compile_for_target(
                job.config, job.arch, shape=job.shape, M=job.M, out_dtype=out_dtype
            )
        shared = int(kernel.metadata.shared)
    except Exception as exc:  # noqa: BLE001 - any compiler failure is this config's result
        error = f"compile error: {type(exc).__name__}: {' '.join(str(exc).split())}"[:500]
    text = log.getvalue()
    if error is None and (match := _PTXAS_REGISTERS.search(text)):
        registers = int(match.group(1))
        spill = _PTXAS_SPILLS.search(text)
        spills = int(spill.group(1)) if spill else 0
    return CompileInfo(
        job.arch,
        job.config,
        family.specialization(job.shape, job.M),
        job.out_dtype,
        shared,
        registers,
        spills,
        time.perf_counter() - start,
        error,
    )


def compile_pool(workers: int | None = None) -> ProcessPoolExecutor:
    """A pool of spawned processes that compile with Triton's compiler, never its interpreter.

    Args:
        workers: processes; default: the CPU count minus one, at least one.

    Returns:
        The pool; each process clears TRITON_INTERPRET before importing Triton (`_child_init`).
    """
    count = workers or max(1, (os.cpu_count() or 2) - 1)
    return ProcessPoolExecutor(count, mp_context=mp.get_context("spawn"), initializer=_child_init)


def prune(
    configs: Sequence[KernelConfig],
    *,
    arch: int,
    M: int,
    N: int,
    K: int,
    block_shape: tuple[int, int] | None,
    out_dtype: str,
    cache: CompileCache | None = None,
    workers: int | None = None,
    pool: ProcessPoolExecutor | None = None,
    family: str = DEFAULT_FAMILY,
    params: tuple[tuple[str, int], ...] = (),
) -> tuple[list[KernelConfig], list[Rejection]]:
    """Split configs into those that can launch on `arch` and those that cannot, by compiling.

    Configs not yet in the cache are compiled in a spawned process pool and cached; no GPU is
    needed. Rejections are recorded as trials with their status (out_of_resources, or
    compile_error when the compiler itself failed) and reason.

    Args:
        configs: the candidates.
        arch: compute capability as an int: 80, 86, 87, 89, 90, 100 or 120.
        M: rows of A (tokens); only its specialization (1, % 16, other) matters.
        N: rows of B.
        K: the reduction dimension.
        block_shape: [group_n, group_k].
        out_dtype: "bfloat16" or "float16".
        cache: the on-disk cache; default: `CompileCache()` under `default_cache_dir()`.
        workers: processes of the pool made for the misses (see `compile_pool`).
        pool: a pool from `compile_pool` to use instead of making one.
        family: the kernel family (`tuner.kernels.registry`).
        params: the family's other dimensions (`tuner.kernels.shape.Shape.params`).

    Returns:
        (runnable configs in their given order, rejections in their given order).

    Raises:
        ValueError: an architecture without known limits, or an unknown out_dtype.
    """
    infos = compile_infos(
        configs,
        arch=arch,
        M=M,
        N=N,
        K=K,
        block_shape=block_shape,
        out_dtype=out_dtype,
        cache=cache,
        workers=workers,
        pool=pool,
        family=family,
        params=params,
    )
    runnable: list[KernelConfig] = []
    rejected: list[Rejection] = []
    for config in configs:
        problem = launch_problem(infos[config])
        if problem is None:
            runnable.append(config)
        else:
            rejected.append(problem)
    return runnable, rejected


def compile_infos(
    configs: Sequence[KernelConfig],
    *,
    arch: int,
    M: int,
    N: int,
    K: int,
    block_shape: tuple[int, int] | None,
    out_dtype: str,
    cache: CompileCache | None = None,
    workers: int | None = None,
    pool: ProcessPoolExecutor | None = None,
    family: str = DEFAULT_FAMILY,
    params: tuple[tuple[str, int], ...] = (),
) -> dict[KernelConfig, CompileInfo]:
    """CompileInfo of every config: from the cache, else compiled in a pool and cached.

    Arguments as `prune`. Returns a dict from config to its info (compile_s 0 if cached).

    Raises:
        ValueError: an architecture without known limits, or an unknown out_dtype.
    """
    if arch not in MAX_SHARED_BYTES:
        raise ValueError(
            f"no resource limits known for sm{arch}; known: "
            f"{', '.join(f'sm{a}' for a in MAX_SHARED_BYTES)}"
        )
    if out_dtype not in OUT_DTYPES:
        raise ValueError(f"out_dtype must be bfloat16 or float16, got {out_dtype!r}")
    cache = cache or CompileCache(family=family)
    spec = get_family(family).specialization(Shape(N, K, as_block_shape(block_shape), params), M)
    unique = list(dict.fromkeys(configs))
    infos = cache.get_many(unique, arch=arch, specialization=spec, out_dtype=out_dtype)
    missing = [config for config in unique if config not in infos]
    if missing:
        jobs = [
            CompileJob(
                config,
                arch,
                M,
                N,
                K,
                as_block_shape(block_shape),
                out_dtype,
                family=family,
                params=params,
            )
            for config in missing
        ]
        executor = compile_pool(workers) if pool is None else pool
        try:
            for info in executor.map(compile_job, jobs):
                cache.put(info)
                infos[info.config] = info
        finally:
            if executor is not pool:
                executor.shutdown(cancel_futures=True)
    return infos
