"""Compile-for-target pruning: each config's shared memory, registers and spills from the
compiler, cached on disk, and the configs that cannot launch on an architecture, before any GPU
time is spent."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import multiprocessing as mp
import os
import re
import sqlite3
import threading
import time
import warnings
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

from tuner.kernels.config import KernelConfig
from tuner.measure.trial import TrialResult, TrialStatus

# torch and triton are imported only inside the compile pool's processes, after TRITON_INTERPRET
# is cleared there: a process in which Triton's interpreter ran cannot generate code any more.

# Most shared memory one thread block may use (with the opt-in attribute) and most 32-bit
# registers per thread block, per compute capability. Source: CUDA C++ Programming Guide,
# "Technical Specifications per Compute Capability" (CUDA 12.x): 163 KB for 8.0 and 8.7, 99 KB for
# 8.6, 8.9 and 12.x, 227 KB for 9.0 and 10.x; 64 K registers per block from 5.0 on. Triton refuses
# a launch whose `metadata.shared` exceeds the device's opt-in maximum (`OutOfResources` in
# triton/compiler/compiler.py, CompiledKernel._init_handles), which is what this table predicts.
MAX_SHARED_BYTES: dict[int, int] = {
    80: 163 * 1024, 86: 99 * 1024, 87: 163 * 1024, 89: 99 * 1024,
    90: 227 * 1024, 100: 227 * 1024, 120: 99 * 1024,
}
MAX_REGISTERS_PER_BLOCK = 64 * 1024
# Registers are allocated per warp in units of 256 (CUDA occupancy calculator, "register
# allocation unit size" 256 for every compute capability from 5.0 on).
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
        specialization: `specialization_key` of (M, N, K, block_shape).
        out_dtype: "bfloat16" or "float16".
        shared_bytes: shared memory per program (Triton's `metadata.shared`); None if it failed.
        n_regs: registers per thread from ptxas's log; None when ptxas did not run or log.
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


@dataclass(frozen=True)
class Rejection:
    """A config that cannot run, with the trial status and reason to record it under."""

    config: KernelConfig
    status: TrialStatus
    reason: str

    def as_result(self) -> TrialResult:
        """The trial to record: never launched, so no latency and no measure time."""
        return TrialResult(self.status, error=self.reason, measure_s=0.0)


def _int_class(value: int) -> str:
    """How Triton's launcher specializes an integer argument: 1, divisible by 16, or neither."""
    kind = "1" if value == 1 else ("d16" if value % 16 == 0 else "any")
    return kind if -(2**31) <= value < 2**31 else kind + ":i64"


def specialization_key(M: int, N: int, K: int, block_shape: tuple[int, int]) -> str:
    """The part of (M, N, K, block_shape) that selects a different binary, as a short string.

    The kernel's integer arguments are M, N, K, group_n, group_k and strides that equal K, N or
    ceil(K / group_k) for contiguous tensors (`tuner.kernels.dense.target.launch_specialization`);
    each is
    specialized as 1, divisible by 16, or neither (and i64 past 2**31). So M = 1, M % 16 == 0
    and other M are three specializations of one shape.

    Args:
        M: rows of A.
        N: rows of B.
        K: the reduction dimension.
        block_shape: [group_n, group_k].

    Returns:
        e.g. "M=1,N=d16,K=d16,gn=d16,gk=d16,kg=any" for M=1, N=5120, K=3072, [128, 128].
    """
    group_n, group_k = block_shape
    k_groups = -(-K // group_k)
    values = {"M": M, "N": N, "K": K, "gn": group_n, "gk": group_k, "kg": k_groups}
    return ",".join(f"{name}={_int_class(value)}" for name, value in values.items())


def launch_problem(info: CompileInfo) -> Rejection | None:
    """Why a compiled config cannot launch on its architecture, or None if it can.

    Checks the compiler error, shared memory against MAX_SHARED_BYTES and registers per block
    against MAX_REGISTERS_PER_BLOCK. Spills slow a kernel down but do not stop it: not checked.

    Args:
        info: what the compiler reported for the config on its architecture.

    Returns:
        The Rejection to record (status compile_error or out_of_resources), or None.

    Raises:
        KeyError: the architecture is not in MAX_SHARED_BYTES.
    """
    if info.error is not None:
        return Rejection(info.config, TrialStatus.COMPILE_ERROR, info.error)
    limit = MAX_SHARED_BYTES[info.arch]
    if info.shared_bytes is not None and info.shared_bytes > limit:
        return Rejection(
            info.config, TrialStatus.OUT_OF_RESOURCES,
            f"pruned before launch: shared memory {info.shared_bytes} bytes > {limit} bytes per "
            f"block on sm{info.arch}",
        )
    if info.n_regs is not None:
        per_warp = -(-info.n_regs * 32 // REGISTER_UNIT) * REGISTER_UNIT
        per_block = per_warp * info.config.num_warps
        if per_block > MAX_REGISTERS_PER_BLOCK:
            return Rejection(
                info.config, TrialStatus.OUT_OF_RESOURCES,
                f"pruned before launch: {info.n_regs} registers x {info.config.num_warps} warps "
                f"= {per_block} > {MAX_REGISTERS_PER_BLOCK} registers per block",
            )
    return None


def default_cache_dir() -> Path:
    """`$TUNER_CACHE_DIR/compile`, else `$XDG_CACHE_HOME/blockfp8-tuner/compile`, else
    `~/.cache/blockfp8-tuner/compile`."""
    if os.environ.get(ENV_CACHE_DIR):
        return Path(os.environ[ENV_CACHE_DIR]) / "compile"
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "blockfp8-tuner" / "compile"


def toolchain_key() -> str:
    """Triton's version and the sha256 of the kernel and its launch specialization
    (tuner/kernels/dense/kernel.py, target.py): a cached entry is valid for both.

    Read without importing triton (package metadata and the file's bytes).
    """
    try:
        triton_version = metadata.version("triton")
    except metadata.PackageNotFoundError:
        triton_version = "none"
    dense = Path(__file__).parents[1] / "kernels" / "dense"
    source = b"".join((dense / name).read_bytes() for name in ("kernel.py", "target.py"))
    return f"triton-{triton_version}:kernel-{hashlib.sha256(source).hexdigest()[:16]}"


class CompileCache:
    """CompileInfo per (toolchain, arch, specialization, out_dtype, config) in one SQLite file.

    Several processes may read and write it at once (WAL, busy timeout); each write is one
    `INSERT OR REPLACE`.
    """

    def __init__(self, directory: Path | str | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir()
        self.path = self.directory / "compile.sqlite"
        self.toolchain = toolchain_key()
        self.directory.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS compile_info (toolchain TEXT, arch INTEGER, "
                "specialization TEXT, out_dtype TEXT, config TEXT, body TEXT, "
                "PRIMARY KEY (toolchain, arch, specialization, out_dtype, config))"
            )

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30.0)
        db.execute("PRAGMA journal_mode=WAL")
        return db

    def _key(self, arch: int, specialization: str, out_dtype: str,
             config: KernelConfig) -> tuple[str, int, str, str, str]:
        values = ",".join(str(value) for value in config.as_dict().values())
        return (self.toolchain, arch, specialization, out_dtype, values)

    def get_many(
        self, configs: Iterable[KernelConfig], *, arch: int, specialization: str, out_dtype: str
    ) -> dict[KernelConfig, CompileInfo]:
        """The cached entries among `configs` (absent ones are left out)."""
        found: dict[KernelConfig, CompileInfo] = {}
        with contextlib.closing(self._connect()) as db:
            for config in configs:
                row = db.execute(
                    "SELECT body FROM compile_info WHERE toolchain=? AND arch=? AND "
                    "specialization=? AND out_dtype=? AND config=?",
                    self._key(arch, specialization, out_dtype, config),
                ).fetchone()
                if row is not None:
                    body = json.loads(row[0])
                    found[config] = CompileInfo(**{**body, "config": config, "compile_s": 0.0})
        return found

    def put(self, info: CompileInfo) -> None:
        """Store one entry (replacing an older one with the same key)."""
        body = {**asdict(info), "config": None}
        with contextlib.closing(self._connect()) as db, db:
            db.execute(
                "INSERT OR REPLACE INTO compile_info VALUES (?, ?, ?, ?, ?, ?)",
                (*self._key(info.arch, info.specialization, info.out_dtype, info.config),
                 json.dumps(body)),
            )


@dataclass(frozen=True)
class CompileJob:
    """One compile for the pool: a config, its target and the launch it must match."""

    config: KernelConfig
    arch: int
    M: int
    N: int
    K: int
    block_shape: tuple[int, int]
    out_dtype: str
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

    from tuner.kernels.dense.target import compile_for_target

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
            kernel = compile_for_target(job.config.as_dict(), job.arch, M=job.M, N=job.N,
                                        K=job.K, block_shape=job.block_shape, out_dtype=out_dtype)
        shared = int(kernel.metadata.shared)
    except Exception as exc:  # noqa: BLE001 - any compiler failure is this config's result
        error = f"compile error: {type(exc).__name__}: {' '.join(str(exc).split())}"[:500]
    text = log.getvalue()
    if error is None and (match := _PTXAS_REGISTERS.search(text)):
        registers = int(match.group(1))
        spill = _PTXAS_SPILLS.search(text)
        spills = int(spill.group(1)) if spill else 0
    return CompileInfo(job.arch, job.config, specialization_key(job.M, job.N, job.K,
                       job.block_shape), job.out_dtype, shared, registers, spills,
                       time.perf_counter() - start, error)


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
    block_shape: tuple[int, int],
    out_dtype: str,
    cache: CompileCache | None = None,
    workers: int | None = None,
    pool: ProcessPoolExecutor | None = None,
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

    Returns:
        (runnable configs in their given order, rejections in their given order).

    Raises:
        ValueError: an architecture without known limits, or an unknown out_dtype.
    """
    infos = compile_infos(configs, arch=arch, M=M, N=N, K=K, block_shape=block_shape,
                          out_dtype=out_dtype, cache=cache, workers=workers, pool=pool)
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
    block_shape: tuple[int, int],
    out_dtype: str,
    cache: CompileCache | None = None,
    workers: int | None = None,
    pool: ProcessPoolExecutor | None = None,
) -> dict[KernelConfig, CompileInfo]:
    """CompileInfo of every config: from the cache, else compiled in a pool and cached.

    Arguments as `prune`. Returns a dict from config to its info (compile_s 0 if cached).

    Raises:
        ValueError: an architecture without known limits, or an unknown out_dtype.
    """
    if arch not in MAX_SHARED_BYTES:
        raise ValueError(f"no resource limits known for sm{arch}; known: "
                         f"{', '.join(f'sm{a}' for a in MAX_SHARED_BYTES)}")
    if out_dtype not in ("bfloat16", "float16"):
        raise ValueError(f"out_dtype must be bfloat16 or float16, got {out_dtype!r}")
    cache = cache or CompileCache()
    spec = specialization_key(M, N, K, block_shape)
    unique = list(dict.fromkeys(configs))
    infos = cache.get_many(unique, arch=arch, specialization=spec, out_dtype=out_dtype)
    missing = [config for config in unique if config not in infos]
    if missing:
        jobs = [CompileJob(config, arch, M, N, K, tuple(block_shape), out_dtype)
                for config in missing]
        owned = compile_pool(workers) if pool is None else None
        try:
            for info in (owned or pool).map(compile_job, jobs):
                cache.put(info)
                infos[info.config] = info
        finally:
            if owned is not None:
                owned.shutdown(cancel_futures=True)
    return infos
