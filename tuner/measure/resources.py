"""What the compiler says a config needs (shared memory, registers, spills) for one launch
specialization, and whether that fits an architecture's limits: the facts that prune a config
before any GPU time is spent."""

from __future__ import annotations

from dataclasses import dataclass

from tuner.core import TrialStatus
from tuner.kernels.config import KernelConfig
from tuner.measure.trial import TrialResult

# Most shared memory one thread block may use (with the opt-in attribute) and most 32-bit
# registers per thread block, per compute capability. Source: CUDA C++ Programming Guide,
# "Technical Specifications per Compute Capability" (CUDA 12.x): 163 KB for 8.0 and 8.7, 99 KB for
# 8.6, 8.9 and 12.x, 227 KB for 9.0 and 10.x; 64 K registers per block from 5.0 on. Triton refuses
# a launch whose `metadata.shared` exceeds the device's opt-in maximum (`OutOfResources` in
# triton/compiler/compiler.py, CompiledKernel._init_handles), which is what this table predicts.
MAX_SHARED_BYTES: dict[int, int] = {
    80: 163 * 1024,
    86: 99 * 1024,
    87: 163 * 1024,
    89: 99 * 1024,
    90: 227 * 1024,
    100: 227 * 1024,
    120: 99 * 1024,
}


MAX_REGISTERS_PER_BLOCK = 64 * 1024


# Registers are allocated per warp in units of 256 (CUDA occupancy calculator, "register
# allocation unit size" 256 for every compute capability from 5.0 on).
REGISTER_UNIT = 256


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
            info.config,
            TrialStatus.OUT_OF_RESOURCES,
            f"pruned before launch: shared memory {info.shared_bytes} bytes > {limit} bytes per "
            f"block on sm{info.arch}",
        )
    if info.n_regs is not None:
        per_warp = -(-info.n_regs * 32 // REGISTER_UNIT) * REGISTER_UNIT
        per_block = per_warp * info.config.num_warps
        if per_block > MAX_REGISTERS_PER_BLOCK:
            return Rejection(
                info.config,
                TrialStatus.OUT_OF_RESOURCES,
                f"pruned before launch: {info.n_regs} registers x {info.config.num_warps} warps "
                f"= {per_block} > {MAX_REGISTERS_PER_BLOCK} registers per block",
            )
    return None
