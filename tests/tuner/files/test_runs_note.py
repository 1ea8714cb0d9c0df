"""Winners of several sweeps for one (shape, M): the file's notes and `tuner winners` name the
sweep that stands and those set aside (their latencies are not compared)."""

from __future__ import annotations

from types import SimpleNamespace

from tuner.cli.export import runs_summary
from tuner.files.merge import merge_shape
from tuner.files.merge_notes import runs_note
from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.space import default_config

FAST = KernelConfig(32, 128, 128, 1, 4, 3)


def _winner(M: int, other_sweeps: tuple[int, ...], decided: bool = True):
    return SimpleNamespace(
        M=M,
        config=FAST.as_dict(),
        latency_us=5.0,
        default_latency_us=9.0,
        is_default=False,
        decided=decided,
        spread_us=0.1,
        sweep_id=3,
        other_sweeps=other_sweeps,
    )


def test_the_standing_sweep_and_those_set_aside_are_named() -> None:
    merged = merge_shape(
        [_winner(1, ()), _winner(16, (1,)), _winner(32, (1, 2), False)],
        m_requested=[1, 16, 32],
        default=default_config(),
    )
    assert merged.notes == [
        "M=16: sweep 3's winner (decided last) stands; sweep 1 also tuned it, not compared by "
        "latency (another run)",
        "M=32: sweep 3's winner (the newest sweep) stands; sweeps 1, 2 also tuned it, not "
        "compared by latency (another run)",
    ]
    assert runs_note(_winner(1, ())) is None
    assert runs_summary([_winner(1, ()), _winner(16, (1,)), _winner(32, (1, 2))]) == (
        "note: 2 (N, K, M) were tuned by several sweeps; each shows the winner decided last "
        "(else the newest sweep's), not the lowest latency across runs; set aside: sweep(s) "
        "1, 2 (`tuner verify` re-times interleaved)"
    )
    assert runs_summary([_winner(1, ())]) is None
