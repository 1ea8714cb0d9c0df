"""bench/landscape_stats.py: a landscape's optima, what they gain over vLLM's default, and how
many configs come near them; a bad file or --ratios is one line, exit 2."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from bench.landscape_file import landscape_json
from tests.tuner.measure.test_landscape import landscape_of
from tuner.core import TrialStatus
from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.space import default_config
from tuner.measure.trial import TrialResult

REPO = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location(
    "landscape_stats", REPO / "bench" / "landscape_stats.py"
)
ls = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(ls)

DEFAULT = default_config()  # 64x128x128 g32 w4 s2
A, B = KernelConfig(16, 64, 128, 1, 4, 3), KernelConfig(32, 64, 128, 1, 4, 3)
C, D = KernelConfig(32, 128, 128, 1, 4, 3), KernelConfig(256, 256, 128, 1, 8, 5)


def ok(latency_us: float) -> TrialResult:
    return TrialResult(TrialStatus.OK, latency_us, latency_us, latency_us)


# 256,384,1: A is the optimum, B at 10/10.2 = 0.980 of its speed, C at 0.962, the default 2x
# slower, D cannot run (None); 256,384,16: the default cannot run, B at 0.909; 576,256,1: nothing
# ran, left out.
LATENCIES = {
    (256, 384, 1): {DEFAULT: 20.0, A: 10.0, B: 10.2, C: 10.4, D: None},
    (256, 384, 16): {DEFAULT: None, A: 5.0, B: 5.5},
    (576, 256, 1): {D: None},
}
RESULTS = [
    (*problem, config, TrialResult(TrialStatus.OUT_OF_RESOURCES) if us is None else ok(us))
    for problem, row in LATENCIES.items()
    for config, us in row.items()
]


def test_a_row_per_problem_a_summary_and_bad_input_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "l20.json").write_text(landscape_json(landscape_of(RESULTS)))
    assert ls.main(["l20.json", "--ratios", "0.95,0.97,0.98,0.97"]) == 0
    lines = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert lines[:4] == [
        "NVIDIA_L20 (l20.json)".split(),
        "N K M ok optimum optimum_us vs default >= 0.98 >= 0.97 >= 0.95".split(),
        "256 384 1 4/5 16x64x128 g1 w4 s3 10.00 2.00x 2 2 3".split(),
        "256 384 16 2/3 16x64x128 g1 w4 s3 5.00 cannot run 1 1 1".split(),
    ]
    assert " ".join(lines[4]) == (
        "2 (N, K, M): the optimum is 2.00x vLLM's default (geomean of the 1 where it runs); "
        "configs at >= 0.95 of the optimum: median 3, fewest 1 (256,384,16)"
    )
    for args, message in [
        (["l20.json", "--ratios", "0.9,1.5"], "--ratios '0.9,1.5': give fractions in (0, 1]"),
        (["missing.json"], "missing.json: No such file or directory"),
    ]:
        with pytest.raises(SystemExit) as exit_:
            ls.main(args)
        assert exit_.value.code == 2
        assert capsys.readouterr().err.splitlines()[-1].endswith(f"error: {message}")
