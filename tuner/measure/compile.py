"""Compile-for-target pruning, before any GPU time is spent: what the compiler says each config
needs (shared memory, registers, spills) for one launch specialization, whether that fits an
architecture (`launch_problem`), the pool that compiles the next candidates while the GPU
measures (`tuner.run.compile_gate`), and whether imported entries can launch on their device
(`check_entries`), with no GPU.

An entry tuned on one architecture can need more shared memory than another has: vLLM's sm90
entry 128x256x128 with 4 stages needs about 148 KB, and an sm89 GPU such as the L20 allows
101,376 bytes per block, so vLLM fails with Triton's OutOfResources when it first runs that M.
"""

from __future__ import annotations

import contextlib
import io
import multiprocessing as mp
import os
import re
import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from tuner.core import TrialStatus, error_line
from tuner.kernels.config import KernelConfig
from tuner.kernels.gpus import KNOWN_GPUS, MAX_SHARED_BYTES, gpu_model
from tuner.kernels.registry import DEFAULT_FAMILY, get_family
from tuner.kernels.shape import Shape
from tuner.kernels.vllm_table import capability_number
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
_PTXAS_REGISTERS = re.compile(r"Used (\d+) registers")
_PTXAS_SPILLS = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")


@dataclass(frozen=True)
class CompileInfo:
    """What the compiler reports for one config, architecture and launch specialization.

    Attributes:
        arch: compute capability as an int (89, 90, ...).
        config: the config compiled.
        shared_bytes: shared memory per program (`metadata.shared`); None if it failed.
        n_regs: registers per thread from ptxas's log; None when ptxas did not log.
        spill_bytes: bytes of spill stores from ptxas's log; None as n_regs.
        compile_s: wall seconds of the compile (0 when answered from the cache).
        error: one line when the compiler rejected the config, else None.
    """

    arch: int
    config: KernelConfig
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
    """First in every pool process: no interpreter, quiet Triton, ptxas's log.

    TRITON_DUMP_PTXAS_LOG prints ptxas's `-v` log (registers, spills), TRITON_ALWAYS_COMPILE
    (switched on per job by `compile_job`) compiles and logs even when Triton's cache has the
    binary. Neither is part of Triton's cache key (`get_cache_invalidating_env_vars`, Triton
    3.6 to 3.9), so the binaries land under the key the measuring process computes.
    """
    os.environ.pop("TRITON_INTERPRET", None)
    _exit_with_parent(os.getppid())
    warnings.filterwarnings("ignore", message="TRITON_DEFAULT_FP_FUSION is unset")
    os.environ["TRITON_DUMP_PTXAS_LOG"] = "1"
    os.environ["TRITON_ALWAYS_COMPILE"] = "0"


def compile_job(job: CompileJob) -> CompileInfo:
    """Compile one config for its target in a pool process and read what the compiler says; the
    binary lands in Triton's cache (TRITON_CACHE_DIR, inherited) under the key a launch with the
    same config and specialization computes. A compiler error is returned in `error`."""
    import torch

    if "TRITON_ALWAYS_COMPILE" in os.environ:
        os.environ["TRITON_ALWAYS_COMPILE"] = "1" if job.need_info else "0"
    log = io.StringIO()
    start = time.perf_counter()
    shared = registers = spills = error = None
    try:
        with contextlib.redirect_stdout(log):
            kernel = get_family(job.family).compile_for_target(
                job.config,
                job.arch,
                shape=job.shape,
                M=job.M,
                out_dtype=getattr(torch, job.out_dtype),
            )
        shared = int(kernel.metadata.shared)
    except Exception as exc:  # noqa: BLE001 - any compiler failure is this config's result
        error = "compile error: " + error_line(exc, 500)
    text = log.getvalue()
    if error is None and (match := _PTXAS_REGISTERS.search(text)):
        registers = int(match.group(1))
        spill = _PTXAS_SPILLS.search(text)
        spills = int(spill.group(1)) if spill else 0
    took = time.perf_counter() - start
    return CompileInfo(job.arch, job.config, shared, registers, spills, took, error)


def compile_pool(workers: int | None = None) -> ProcessPoolExecutor:
    """Spawned processes (default: the CPU count minus one) that compile with Triton's compiler,
    never its interpreter (`_child_init` clears TRITON_INTERPRET before Triton is imported)."""
    processes = workers or max(1, (os.cpu_count() or 2) - 1)
    context = mp.get_context("spawn")
    return ProcessPoolExecutor(processes, mp_context=context, initializer=_child_init)


def compile_infos(
    firsts: Mapping[KernelConfig, int],
    *,
    arch: int,
    shape: Shape,
    out_dtype: str,
    family: str = DEFAULT_FAMILY,
    pool: ProcessPoolExecutor | None = None,
) -> dict[KernelConfig, CompileInfo]:
    """CompileInfo of every config for `arch`, each compiled at the launch of (shape, its M in
    `firsts`) in `pool` (a `compile_pool()` is made when None). No GPU needed.

    Raises:
        ValueError: an architecture without known limits.
    """
    if arch not in MAX_SHARED_BYTES:
        known = ", ".join(f"sm{a}" for a in MAX_SHARED_BYTES)
        raise ValueError(f"no resource limits known for sm{arch}; known: {known}")
    jobs = [CompileJob(c, arch, shape, M, out_dtype, family) for c, M in firsts.items()]
    executor = pool or compile_pool()
    try:
        return {info.config: info for info in executor.map(compile_job, jobs)}
    finally:
        if executor is not pool:
            executor.shutdown(cancel_futures=True)


# Output dtype an import is checked for: vLLM's block-FP8 models run in bfloat16 (float16 takes
# the same bytes per element, so the same shared memory).
CHECK_OUT_DTYPE = "bfloat16"
_AMD_KEYS = frozenset({"kpack", "matrix_instr_nonkdim", "waves_per_eu"})
_AMD_LINE = "an AMD entry (kpack, waves_per_eu ...): not compiled for NVIDIA"


@dataclass(frozen=True)
class DeviceArch:
    """A device's architecture and where it was learned (for the user's line)."""

    arch: int
    source: str

    @property
    def shared_bytes(self) -> int | None:
        """Most shared memory per block on this architecture; None when not known."""
        return MAX_SHARED_BYTES.get(self.arch)


def device_arch(device_name: str, capabilities: Sequence[str]) -> DeviceArch | None:
    """The architecture to check a device's (vLLM key) imported entries for: from the first of
    its trials' compute `capabilities` ("8.9"; "" for the interpreter) that names one, else from
    KNOWN_GPUS; None when neither knows the device."""
    for capability in capabilities:
        arch = capability_number(capability)
        if arch is not None:
            return DeviceArch(
                arch, f"from its trials in the store, compute capability {capability.strip()}"
            )
    model = gpu_model(device_name)
    if model in KNOWN_GPUS:
        return DeviceArch(KNOWN_GPUS[model], f"from the table of known GPUs, {model}")
    return None


@dataclass(frozen=True)
class LaunchVerdict:
    """What compiling a file's entries for an architecture found.

    Attributes:
        arch: the compute capability compiled for.
        cannot_launch: M -> why its entry cannot launch (config, what it needs, the limit).
        unchecked: M -> why its entry was not checked (an AMD entry, a compiler error).
        configs: distinct configs checked (one compile each).
    """

    arch: int
    cannot_launch: dict[int, str]
    unchecked: dict[int, str]
    configs: int


def check_entries(
    configs: Mapping[int, Mapping[str, int]],
    shape: Shape,
    *,
    arch: int,
    device_name: str,
    pool: ProcessPoolExecutor | None = None,
    family: str = DEFAULT_FAMILY,
) -> LaunchVerdict:
    """Compile each distinct config of a file for `arch` and say which entries cannot launch.

    One compile per distinct config, at the launch of the first M that uses it: shared memory
    depends on the tiles and stages, not on M.

    Args:
        configs: M -> entry as imported (entries with AMD keys are not checked).
        shape, family: the file's shape and kernel family.
        arch: compute capability as an int; must be in MAX_SHARED_BYTES.
        device_name: named in the reasons.
        pool: a `compile_pool` (one is made when None).

    Raises:
        ValueError: an architecture without known limits, an unknown family, or a shape
            without a dimension the family's kernel is compiled for (a fused-MoE file's name
            gives E and N, not top_k).
    """
    unchecked = {M: _AMD_LINE for M in sorted(configs) if configs[M].keys() & _AMD_KEYS}
    by_m = {M: KernelConfig.from_dict(configs[M]) for M in sorted(configs) if M not in unchecked}
    firsts = _first_uses(by_m, shape, family)
    infos = compile_infos(
        firsts, arch=arch, shape=shape, out_dtype=CHECK_OUT_DTYPE, family=family, pool=pool
    )
    limit = MAX_SHARED_BYTES[arch]
    where, cannot_launch = f"{device_name} (sm{arch})", {}
    for M, config in by_m.items():
        info, short, problem = infos[config], config.short(), launch_problem(infos[config])
        if problem is not None and info.error is not None:
            unchecked[M] = f"config {short} did not compile here: {info.error}"
        elif problem is not None and (info.shared_bytes or 0) > limit:
            needs = f"needs {info.shared_bytes} bytes of shared memory"
            cannot_launch[M] = f"config {short} {needs}; {where} has {limit} per block"
        elif problem is not None:
            reason = str(problem.error).removeprefix("pruned before launch: ")
            cannot_launch[M] = f"config {short}: {reason} on {where}"
    return LaunchVerdict(arch, cannot_launch, dict(sorted(unchecked.items())), len(infos))


def _first_uses(
    by_m: Mapping[int, KernelConfig], shape: Shape, family: str
) -> dict[KernelConfig, int]:
    """Each distinct config with the first M that uses it.

    Raises:
        ValueError: the shape lacks a dimension the family's launch needs (MoE: top_k).
    """
    firsts = {config: M for M, config in sorted(by_m.items(), reverse=True)}  # smallest M wins
    shape_row = get_family(family).shapes.shape_row
    try:
        if shape_row is not None:
            shape_row(shape)  # every dimension the family tunes a shape by
    except KeyError as exc:  # a dimension the file's name does not carry (MoE: top_k)
        raise ValueError(f"the file's name does not give {exc.args[0]}") from None
    return firsts
