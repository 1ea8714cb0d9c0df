"""Compile-for-target pruning, before any GPU time is spent: what the compiler says each config
needs (shared memory, registers, spills) for one launch specialization, cached on disk, whether
that fits an architecture, and the pool that compiles the next candidates while the GPU
measures (`Precompiler`)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import multiprocessing as mp
import os
import re
import threading
import time
import warnings
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

from tuner.core import OUT_DTYPES, TrialStatus
from tuner.kernels.config import KernelConfig
from tuner.kernels.gpus import MAX_SHARED_BYTES
from tuner.kernels.registry import DEFAULT_FAMILY, get_family
from tuner.kernels.shape import Shape
from tuner.measure.trial import TrialResult

# torch and triton are imported only inside the compile pool's processes, after TRITON_INTERPRET
# is cleared there: a process in which Triton's interpreter ran cannot generate code any more.

# Most 32-bit registers per block: CUDA C++ Programming Guide, "Technical Specifications per
# Compute Capability" (CUDA 12.x). Triton refuses a launch whose `metadata.shared` exceeds the
# architecture's opt-in maximum (`MAX_SHARED_BYTES`; `OutOfResources`,
# CompiledKernel._init_handles in triton/compiler/compiler.py).
MAX_REGISTERS_PER_BLOCK = 64 * 1024
# Registers are allocated per warp in units of 256 (CUDA occupancy calculator, from 5.0 on).
REGISTER_UNIT = 256
ENV_CACHE_DIR = "TUNER_CACHE_DIR"
# Triton variables a pool process sets to read ptxas's log (see `_child_init`).
_LOG_VARIABLES = ("TRITON_DUMP_PTXAS_LOG", "TRITON_ALWAYS_COMPILE")
_PTXAS_REGISTERS = re.compile(r"Used (\d+) registers")
_PTXAS_SPILLS = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")


@dataclass(frozen=True)
class CompileInfo:
    """What the compiler reports for one config, architecture and launch specialization.

    Attributes:
        arch: compute capability as an int (89, 90, ...).
        config: the config compiled.
        specialization: the family's `specialization` of (shape, M).
        out_dtype: "bfloat16" or "float16".
        shared_bytes: shared memory per program (`metadata.shared`); None if it failed.
        n_regs: registers per thread from ptxas's log; None when ptxas did not log.
        spill_bytes: bytes of spill stores from ptxas's log; None as n_regs.
        compile_s: wall seconds of the compile (0 when answered from the cache).
        error: one line when the compiler rejected the config, else None.
    """

    arch: int
    config: KernelConfig
    specialization: str
    out_dtype: str
    shared_bytes: int | None
    n_regs: int | None
    spill_bytes: int | None
    compile_s: float
    error: str | None = None


def launch_problem(info: CompileInfo) -> TrialResult | None:
    """The trial to record instead of launching a compiled config that cannot launch on its
    architecture (compile_error: a compiler error; out_of_resources: shared memory over
    MAX_SHARED_BYTES, registers per block over MAX_REGISTERS_PER_BLOCK; its `error` says why,
    no latency, no measure time), or None. Spills slow a kernel down but do not stop it.

    Raises:
        KeyError: the architecture is not in MAX_SHARED_BYTES.
    """
    if info.error is not None:
        return TrialResult(TrialStatus.COMPILE_ERROR, error=info.error, measure_s=0.0)
    limit, warps, regs = MAX_SHARED_BYTES[info.arch], info.config.num_warps, info.n_regs or 0
    per_block = -(-regs * 32 // REGISTER_UNIT) * REGISTER_UNIT * warps
    if info.shared_bytes is not None and info.shared_bytes > limit:
        why = f"shared memory {info.shared_bytes} bytes > {limit} bytes per block on sm{info.arch}"
    elif per_block > MAX_REGISTERS_PER_BLOCK:
        why = f"{regs} registers x {warps} warps = {per_block} > {MAX_REGISTERS_PER_BLOCK}"
        why += " registers per block"
    else:
        return None
    return TrialResult(
        TrialStatus.OUT_OF_RESOURCES, error=f"pruned before launch: {why}", measure_s=0.0
    )


def default_cache_dir() -> Path:
    """`$TUNER_CACHE_DIR/compile`, else `$XDG_CACHE_HOME/blockfp8-tuner/compile`, else
    `~/.cache/blockfp8-tuner/compile`."""
    if os.environ.get(ENV_CACHE_DIR):
        return Path(os.environ[ENV_CACHE_DIR]) / "compile"
    return Path(
        os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "blockfp8-tuner", "compile"
    )


def toolchain_key(family: str = DEFAULT_FAMILY) -> str:
    """Triton's version and the sha256 of a family's `compile_modules` (kernel and launch
    specialization), read without importing triton: a cached entry is valid for both.

    Raises:
        ValueError: an unknown family.
    """
    try:
        triton_version = metadata.version("triton")
    except metadata.PackageNotFoundError:
        triton_version = "none"
    kernel_family = get_family(family)
    source = b"".join(
        kernel_family.module_path(module).read_bytes() for module in kernel_family.compile_modules
    )
    return f"triton-{triton_version}:kernel-{hashlib.sha256(source).hexdigest()[:16]}"


class CompileCache:
    """CompileInfo per (toolchain, arch, specialization, out_dtype, config) of one family: one
    JSON file per entry, in a folder per (toolchain, arch, specialization, out_dtype), each
    written whole and renamed into place, so several processes share the cache."""

    def __init__(
        self, directory: Path | str | None = None, *, family: str = DEFAULT_FAMILY
    ) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir()
        self.toolchain = toolchain_key(family)

    def _path(self, arch: int, specialization: str, out_dtype: str, config: KernelConfig) -> Path:
        where = f"{self.toolchain}|sm{arch}|{specialization}|{out_dtype}"
        name = "-".join(str(value) for value in config.as_dict().values())
        return self.directory / hashlib.sha256(where.encode()).hexdigest()[:24] / f"{name}.json"

    def get_many(
        self, configs: Iterable[KernelConfig], *, arch: int, specialization: str, out_dtype: str
    ) -> dict[KernelConfig, CompileInfo]:
        """The cached entries among `configs` (absent ones are left out)."""
        found = {}
        for config in configs:
            try:
                path = self._path(arch, specialization, out_dtype, config)
                body = json.loads(path.read_text(encoding="utf-8"))
            except FileNotFoundError:
                continue
            found[config] = CompileInfo(**{**body, "config": config, "compile_s": 0.0})
        return found

    def put(self, info: CompileInfo) -> None:
        """Store one entry (replacing an older one with the same key)."""
        path = self._path(info.arch, info.specialization, info.out_dtype, info.config)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}")
        partial.write_text(json.dumps({**asdict(info), "config": None}), encoding="utf-8")
        os.replace(partial, path)


@dataclass(frozen=True)
class CompileJob:
    """One compile for the pool: a config, its target, and the launch (shape, M) it must match;
    `need_info`: compile even when Triton's cache has the binary, to read ptxas's log."""

    config: KernelConfig
    arch: int
    shape: Shape
    M: int
    out_dtype: str
    family: str = DEFAULT_FAMILY
    need_info: bool = True


def _exit_with_parent(parent_pid: int) -> None:
    """End this pool process when its parent is gone (a worker killed with SIGKILL cannot shut
    its pool down, and an orphan compiler would keep a CPU busy)."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()


def _child_init() -> None:
    """First in every pool process: no interpreter, quiet Triton, ptxas's log where safe.

    TRITON_DUMP_PTXAS_LOG prints ptxas's `-v` log (registers, spills), TRITON_ALWAYS_COMPILE
    compiles (and logs) even when Triton's cache has the binary; each only when it is not part of
    the installed Triton's cache key (`get_cache_invalidating_env_vars`; neither is on Triton
    3.6 or 3.9), so the binaries land under the key the measuring process computes.
    """
    os.environ.pop("TRITON_INTERPRET", None)
    _exit_with_parent(os.getppid())
    warnings.filterwarnings("ignore", message="TRITON_DEFAULT_FP_FUSION is unset")
    try:
        from triton._C.libtriton import get_cache_invalidating_env_vars

        keyed = set(get_cache_invalidating_env_vars())
    except ImportError:
        keyed = set(_LOG_VARIABLES)
    for name in _LOG_VARIABLES:
        if name in keyed:
            os.environ.pop(name, None)
        else:
            os.environ[name] = "1"
    if "TRITON_ALWAYS_COMPILE" in os.environ:
        os.environ["TRITON_ALWAYS_COMPILE"] = "0"  # switched on per job by `compile_job`


def compile_job(job: CompileJob) -> CompileInfo:
    """Compile one config for its target in a pool process and read what the compiler says; the
    binary lands in Triton's cache (TRITON_CACHE_DIR, inherited) under the key a launch with the
    same config and specialization computes. A compiler error is returned in `error`."""
    import torch

    family = get_family(job.family)
    if "TRITON_ALWAYS_COMPILE" in os.environ:
        os.environ["TRITON_ALWAYS_COMPILE"] = "1" if job.need_info else "0"
    log = io.StringIO()
    start = time.perf_counter()
    shared = registers = spills = error = None
    try:
        with contextlib.redirect_stdout(log):
            kernel = family.compile_for_target(
                job.config,
                job.arch,
                shape=job.shape,
                M=job.M,
                out_dtype=getattr(torch, job.out_dtype),
            )
        shared = int(kernel.metadata.shared)
    except Exception as exc:  # noqa: BLE001 - any compiler failure is this config's result
        error = f"compile error: {type(exc).__name__}: {' '.join(str(exc).split())}"[:500]
    text = log.getvalue()
    if error is None and (match := _PTXAS_REGISTERS.search(text)):
        registers = int(match.group(1))
        spill = _PTXAS_SPILLS.search(text)
        spills = int(spill.group(1)) if spill else 0
    spec = family.specialization(job.shape, job.M)
    took = time.perf_counter() - start
    return CompileInfo(
        job.arch, job.config, spec, job.out_dtype, shared, registers, spills, took, error
    )


def compile_pool(workers: int | None = None) -> ProcessPoolExecutor:
    """Spawned processes (default: the CPU count minus one) that compile with Triton's compiler,
    never its interpreter (`_child_init` clears TRITON_INTERPRET before Triton is imported)."""
    processes = workers or max(1, (os.cpu_count() or 2) - 1)
    context = mp.get_context("spawn")
    return ProcessPoolExecutor(processes, mp_context=context, initializer=_child_init)


def compile_infos(
    configs: Sequence[KernelConfig],
    *,
    arch: int,
    shape: Shape,
    M: int,
    out_dtype: str,
    family: str = DEFAULT_FAMILY,
    cache: CompileCache | None = None,
    workers: int | None = None,
    pool: ProcessPoolExecutor | None = None,
) -> dict[KernelConfig, CompileInfo]:
    """CompileInfo of every config for `arch` at the launch of (shape, M): from the cache, else
    compiled in `pool` (one of `workers` processes is made when None) and cached. No GPU needed.

    Raises:
        ValueError: an architecture without known limits, or an unknown out_dtype.
    """
    if arch not in MAX_SHARED_BYTES:
        known = ", ".join(f"sm{a}" for a in MAX_SHARED_BYTES)
        raise ValueError(f"no resource limits known for sm{arch}; known: {known}")
    if out_dtype not in OUT_DTYPES:
        raise ValueError(f"out_dtype must be bfloat16 or float16, got {out_dtype!r}")
    cache = cache or CompileCache(family=family)
    spec = get_family(family).specialization(shape, M)
    unique = list(dict.fromkeys(configs))
    infos = cache.get_many(unique, arch=arch, specialization=spec, out_dtype=out_dtype)
    jobs = [
        CompileJob(config, arch, shape, M, out_dtype, family)
        for config in unique
        if config not in infos
    ]
    if jobs:
        executor = pool or compile_pool(workers)
        try:
            for info in executor.map(compile_job, jobs):
                cache.put(info)
                infos[info.config] = info
        finally:
            if executor is not pool:
                executor.shutdown(cancel_futures=True)
    return infos
