"""What one trial of a config yields: its status and, when it ran correctly, its latency."""

from __future__ import annotations

from dataclasses import dataclass

from tuner.core import TrialStatus


@dataclass(frozen=True)
class TrialResult:
    """The measurement of one config for one (N, K, M).

    Attributes:
        status: outcome; only `ok` results carry a latency.
        latency_us: median latency in microseconds.
        p20_us: 20th percentile latency in microseconds.
        p80_us: 80th percentile latency in microseconds.
        rel_error: relative Frobenius error of the output against the float64 reference.
        error: one-line reason for a failed trial.
        measure_s: wall seconds the trial took (compile, check and timing).
    """

    status: TrialStatus
    latency_us: float | None = None
    p20_us: float | None = None
    p80_us: float | None = None
    rel_error: float | None = None
    error: str | None = None
    measure_s: float | None = None

    @property
    def ok(self) -> bool:
        """True when the config ran, passed the correctness gate and has a latency."""
        return self.status is TrialStatus.OK and self.latency_us is not None

    @property
    def ok_latency_us(self) -> float:
        """`latency_us` of a result known to be `ok`, typed as a float.

        Raises:
            ValueError: the result is not ok, so it has no latency to compare.
        """
        if self.status is not TrialStatus.OK or self.latency_us is None:
            raise ValueError(f"a {self.status.value} trial has no latency")
        return self.latency_us
