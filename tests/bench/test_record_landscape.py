"""bench/record_landscape.py: a replayed sweep's trials come back as the landscape they came
from."""

import importlib.util
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.cli.common import ok
from tests.cli.robust import ENVIRONMENT, write_landscape
from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.space import default_config, vllm_space
from tuner.measure.landscape import load_landscape

SPEC = importlib.util.spec_from_file_location(
    "record_landscape", Path(__file__).resolve().parents[2] / "bench" / "record_landscape.py"
)
rl = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(rl)
build_landscape = rl.build_landscape


def test_record_returns_the_replayed_landscape(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path, configs = write_landscape(tmp_path, (1, 16))
    db = f"--db=sqlite:///{tmp_path}/t.db"
    sweep = "sweep --device L20 --model tiny --m 1,16 --strategy grid --trials 200 --replay"
    ok(*sweep.split(), path, "--configs", configs, db)
    record = CliRunner().invoke(rl.app, ["--device", "L20", "--out", "rec/l20.json", db])
    assert record.exit_code == 0, record.output
    assert record.stdout.startswith(
        "wrote rec/l20.json: NVIDIA_L20, 4 (N, K, M), 384 trials (336 ok), triton 3.6.0"
    )
    recorded, source = load_landscape(tmp_path / "rec" / "l20.json"), load_landscape(path)
    assert re.fullmatch(r"custom:[0-9a-f]{16}@replay:[0-9a-f]{16}", recorded.space)
    assert dict(recorded.environment) == ENVIRONMENT and recorded.problems == source.problems
    assert recorded.device_name == "NVIDIA_L20"
    assert (recorded.out_dtype, recorded.block_shape) == ("bfloat16", (128, 128))


class Row:
    """A stored trial of (256, 384, M), as `store_trials.device_trials` gives (by trial_id)."""

    def __init__(self, environment_id, latency_us, config=None, out_dtype="bfloat16", M=1):
        self.environment_id, self.latency_us = environment_id, latency_us
        self.N, self.K, self.M, self.block_shape = 256, 384, M, (128, 128)
        self.out_dtype = out_dtype
        self.space, self.status = "vllm", "ok"
        self.config = (config or default_config()).as_dict()
        self.p20_us = self.p80_us = latency_us
        self.environment = {**ENVIRONMENT, "triton": f"3.{environment_id}.0"}


def test_build_keeps_the_largest_environment_the_latest_trial_and_complete_problems():
    other = KernelConfig(16, 32, 64, 1, 4, 2)
    rows = [Row(6, 9.0), Row(9, 7.0), Row(9, 8.0, other), Row(9, 5.0), Row(9, 1.0, None, "float16")]
    landscape, notes = build_landscape(rows, device_name="NVIDIA_L20", recorded_at="now")
    assert landscape.environment["triton"] == "3.9.0"
    trials = landscape.problems[(256, 384, 1)]
    assert {c: r.latency_us for c, r in trials.items()} == {default_config(): 5.0, other: 8.0}
    assert notes == [
        "kept the 3 trials of environment 9, block_shape [128, 128] bfloat16; left out 2 of "
        "other environments or kinds"
    ]
    # complete_only drops the partial problem a cut sweep leaves.
    space = vllm_space()
    cut = {1: len(space), 16: len(space), 256: 700}  # M=256 cut at 700
    rows = [Row(9, 10.0 + m, config, M=m) for m, count in cut.items() for config in space[:count]]
    everything, notes = build_landscape(rows, device_name="NVIDIA_H200", recorded_at="now")
    assert sorted(everything.problems) == [(256, 384, 1), (256, 384, 16), (256, 384, 256)]
    assert notes == []
    complete, notes = build_landscape(
        rows, device_name="NVIDIA_H200", recorded_at="now", complete_only=True
    )
    assert sorted(complete.problems) == [(256, 384, 1), (256, 384, 16)]
    assert all(len(trials) == 1280 for trials in complete.problems.values())
    assert notes == ["left out 1 partial (N, K, M) (fewer than 1280 configs): 256,384,256 (700)"]
    with pytest.raises(
        ValueError, match="no \\(N, K, M\\) has all 1280 configs; the fullest has 700"
    ):
        build_landscape(
            rows[-700:], device_name="NVIDIA_H200", recorded_at="now", complete_only=True
        )
