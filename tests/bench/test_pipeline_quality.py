"""bench/pipeline_quality.py: the end-to-end run on a small replay landscape, scored exactly."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

from tests.cli.robust import CONFIGS, latency_us, write_landscape
from tuner.search.replay import load_landscape

REPO = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("pipeline_quality",
                                              REPO / "bench" / "pipeline_quality.py")
pq = importlib.util.module_from_spec(SPEC)
sys.modules["pipeline_quality"] = pq
SPEC.loader.exec_module(pq)


def test_score_is_optimum_over_picked_latency(tmp_path):
    path, _ = write_landscape(tmp_path, (1, 16))
    landscape = load_landscape(path)
    runnable = [c for c in CONFIGS if not (c.BLOCK_SIZE_M == 128 and c.num_stages == 3)]
    best = {key: min(runnable, key=lambda c, key=key: latency_us(*key, c))
            for key in landscape.problems}
    assert pq.score(landscape, best) == {"geomean": 1.0, "min": 1.0, "problems": 4}
    slow = dict(best)
    key = min(landscape.problems)
    worst = max(runnable, key=lambda c: latency_us(*key, c))
    slow[key] = worst
    ratio = latency_us(*key, best[key]) / latency_us(*key, worst)
    assert pq.score(landscape, slow) == {"geomean": round(ratio ** 0.25, 4),
                                         "min": round(ratio, 4), "problems": 4}


def test_end_to_end_on_a_replay_landscape(tmp_path, monkeypatch):
    path, configs = write_landscape(tmp_path, (1, 16))
    monkeypatch.setattr(pq, "MODEL", "tiny")
    monkeypatch.setattr(pq, "TP", 1)
    out = tmp_path / "result.json"
    monkeypatch.setattr(sys, "argv", ["pipeline_quality.py", "--landscape", str(path),
                                      "--strategy", "grid", "--trials", str(len(CONFIGS)),
                                      "--configs", str(configs), "--out", str(out)])
    pq.main()
    result = json.loads(out.read_text())
    # An exhaustive grid finds every optimum, and the re-timing keeps it: each optimum beats its
    # runner-up by more than the landscape's 1 us spread.
    assert result["strategy"] == "grid"
    assert result["sweep_output"][-1].startswith("384 trials run, 0 pruned")  # 4 tasks x 96
    for name in ("fastest_trial", "decided", "shipped_file"):
        assert result[name] == {"geomean": 1.0, "min": 1.0, "problems": 4}
