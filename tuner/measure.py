"""Live runner: checks a config against the float64 reference, then times it (CUDA, interpreter)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from tuner.space import KernelConfig, why_invalid
from tuner.trial import TrialResult, TrialStatus

OUT_DTYPES = ("bfloat16", "float16")
# Relative Frobenius error a bf16 output must stay under (DESIGN §3).
REL_TOL = 1e-2


@dataclass(frozen=True)
class Problem:
    """One GEMM to tune: C[M, N] = A[M, K] @ B[N, K]^T with block-FP8 scales.

    Attributes:
        M: rows of A (tokens in the batch).
        N: rows of the weight B.
        K: reduction dimension.
        block_shape: [group_n, group_k] of the weight scales.
        out_dtype: "bfloat16" (serving) or "float16" (vLLM's tuning script default).
    """

    M: int
    N: int
    K: int
    block_shape: tuple[int, int] = (128, 128)
    out_dtype: str = "bfloat16"


def summarize_us(samples_s: Sequence[float]) -> tuple[float, float, float]:
    """Median, 20th and 80th percentile of wall-clock samples, converted to microseconds.

    Args:
        samples_s: at least one duration in seconds.

    Returns:
        (median_us, p20_us, p80_us); a single sample gives the same value three times.
    """
    if not samples_s:
        raise ValueError("no samples to summarize")
    us = sorted(sample * 1e6 for sample in samples_s)
    if len(us) == 1:
        return us[0], us[0], us[0]
    cuts = statistics.quantiles(us, n=5, method="inclusive")
    return statistics.median(us), cuts[0], cuts[3]


def classify_error(exc: BaseException) -> TrialStatus:
    """Map an exception raised by compiling or launching the kernel to a trial status."""
    from triton.compiler.errors import CompilationError
    from triton.runtime.errors import OutOfResources

    if isinstance(exc, OutOfResources):
        return TrialStatus.OUT_OF_RESOURCES
    if isinstance(exc, CompilationError):
        return TrialStatus.COMPILE_ERROR
    return TrialStatus.CRASHED


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"[:500]


class KernelRunner:
    """Answers `evaluate(config)` for one Problem by running the real kernel.

    Inputs and the float64 reference are made once. Each config is first run into an output
    poisoned with NaN and checked against the reference (relative Frobenius error below
    `REL_TOL`, every element written); only then is it timed.

    Timing, on `backend="cuda"`: `triton.testing.do_bench`, which clears a 256 MB buffer before
    every run so that A, B and the scales are not L2-resident, and records CUDA events around the
    launch only, so the flush is not counted; we keep its median and 20th/80th percentiles.
    On `backend="interpreter"` (TRITON_INTERPRET=1 set before triton was imported): wall-clock
    median of `interpreter_reps` calls; these are CPU timings of the interpreter, not GPU ones.

    Args:
        problem: the GEMM to tune.
        backend: "cuda" or "interpreter".
        seed: seed of the random inputs.
        interpreter_reps: timed calls per config on the interpreter.
        clock: wall clock in seconds, replaceable in tests.
    """

    def __init__(
        self,
        problem: Problem,
        *,
        backend: str,
        seed: int = 0,
        interpreter_reps: int = 3,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        import torch

        from tuner.reference import make_inputs, reference_matmul

        if backend not in ("cuda", "interpreter"):
            raise ValueError(f"backend must be 'cuda' or 'interpreter', got {backend!r}")
        if problem.out_dtype not in OUT_DTYPES:
            raise ValueError(f"out_dtype must be one of {OUT_DTYPES}, got {problem.out_dtype!r}")
        self.problem = problem
        self.backend = backend
        self.interpreter_reps = interpreter_reps
        self.clock = clock
        self._torch = torch
        device = "cuda" if backend == "cuda" else "cpu"
        self.inputs = make_inputs(
            problem.M, problem.N, problem.K, problem.block_shape, seed=seed, device=device
        )
        self.reference = reference_matmul(self.inputs, problem.block_shape)
        self.out_dtype = getattr(torch, problem.out_dtype)

    def _launch(self, config: KernelConfig, out=None):
        from tuner.kernel import w8a8_block_fp8_matmul

        inputs = self.inputs
        return w8a8_block_fp8_matmul(
            inputs.A, inputs.B, inputs.As, inputs.Bs, self.problem.block_shape,
            config.as_dict(), out_dtype=self.out_dtype, out=out,
        )

    def check(self, config: KernelConfig) -> TrialResult:
        """Run once into a NaN-poisoned output and compare with the reference.

        Returns:
            `ok` with rel_error when every element was written and the error is below REL_TOL;
            otherwise `wrong_result` or the launch failure's status, with the reason.
        """
        from tuner.reference import relative_error

        torch = self._torch
        p = self.problem
        device = self.inputs.A.device
        out = torch.full((p.M, p.N), float("nan"), dtype=self.out_dtype, device=device)
        try:
            self._launch(config, out=out)
            if self.backend == "cuda":
                torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - every launch failure becomes a recorded trial
            return TrialResult(classify_error(exc), error=_one_line(exc))
        unwritten = int(torch.isnan(out).sum())
        error = relative_error(out, self.reference)
        if unwritten:
            return TrialResult(TrialStatus.WRONG_RESULT, rel_error=error,
                               error=f"{unwritten} output elements not written")
        if not error < REL_TOL:
            return TrialResult(TrialStatus.WRONG_RESULT, rel_error=error,
                               error=f"relative error {error:.3g} >= {REL_TOL:g}")
        return TrialResult(TrialStatus.OK, rel_error=error)

    def time_us(self, config: KernelConfig) -> tuple[float, float, float]:
        """(median_us, p20_us, p80_us) of a config that already passed `check`."""
        if self.backend == "cuda":
            from triton.testing import do_bench

            median_ms, p20_ms, p80_ms = do_bench(
                lambda: self._launch(config), quantiles=[0.5, 0.2, 0.8]
            )
            return median_ms * 1e3, p20_ms * 1e3, p80_ms * 1e3
        samples = []
        for _ in range(self.interpreter_reps):
            start = self.clock()
            self._launch(config)
            samples.append(self.clock() - start)
        return summarize_us(samples)

    def evaluate(self, config: KernelConfig) -> TrialResult:
        """Check, then time, one config; never raises for a config that fails.

        Returns:
            A TrialResult; `ok` with latency_us, p20_us, p80_us (microseconds) when the config
            ran and matched the reference, otherwise the failure's status and reason.
        """
        start = time.perf_counter()
        reason = why_invalid(config, self.problem.block_shape)
        if reason is not None:
            return TrialResult(TrialStatus.INVALID, error=reason, measure_s=0.0)
        checked = self.check(config)
        if checked.status is not TrialStatus.OK:
            return replace(checked, measure_s=time.perf_counter() - start)
        try:
            median_us, p20_us, p80_us = self.time_us(config)
        except Exception as exc:  # noqa: BLE001
            return TrialResult(classify_error(exc), error=_one_line(exc),
                               measure_s=time.perf_counter() - start)
        return TrialResult(
            TrialStatus.OK, latency_us=median_us, p20_us=p20_us, p80_us=p80_us,
            rel_error=checked.rel_error, measure_s=time.perf_counter() - start,
        )

