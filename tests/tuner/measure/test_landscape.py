"""Landscapes and their recorded timings: file round trip, answers, samples, the file read once
while unchanged. A replayed sweep in the store: tests/bench/test_record_landscape.py; a file's
statistics: tests/bench/test_landscape_stats.py."""

import json

import pytest

from bench.landscape_file import landscape_from_results, landscape_json, optimum
from tests.cli.robust import ENVIRONMENT
from tuner.core import TrialStatus
from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.space import default_config, vllm_space
from tuner.measure.landscape import (
    FORMAT,
    NOT_RECORDED,
    RecordedTimings,
    load_landscape,
)
from tuner.measure.trial import TrialResult


def synthetic(config, m):
    """A made-up latency per (config, M); BLOCK_SIZE_M=256 with 5 stages does not fit."""
    if config.BLOCK_SIZE_M == 256 and config.num_stages == 5:
        return TrialResult(TrialStatus.OUT_OF_RESOURCES, error="shared memory")
    latency = 10.0 + abs(config.BLOCK_SIZE_M - 4 * m) / 16 + 256 / config.BLOCK_SIZE_N
    latency += config.num_stages * 0.1 + config.GROUP_SIZE_M / 64 + config.num_warps / 8
    return TrialResult(TrialStatus.OK, latency, latency - 0.5, latency + 0.5)


def landscape_of(results, environment=ENVIRONMENT):
    """An NVIDIA_L20 landscape of vLLM's space (bf16, block [128, 128]) of (N, K, M, config,
    TrialResult) rows."""
    return landscape_from_results(
        device_name="NVIDIA_L20",
        environment=environment,
        recorded_at="2026-11-30T00:00:00Z",
        space="vllm",
        out_dtype="bfloat16",
        block_shape=(128, 128),
        results=results,
    )


def make_landscape(shapes=((256, 384), (576, 256)), m_values=(1, 16)):
    return landscape_of(
        [
            (n, k, m, config, synthetic(config, m))
            for n, k in shapes
            for m in m_values
            for config in vllm_space()
        ]
    )


def test_round_trip_answers_and_one_read_until_the_file_changes(tmp_path):
    landscape = make_landscape()
    path = tmp_path / "l20.json"
    path.write_text(landscape_json(landscape))
    loaded = load_landscape(path)
    assert loaded == landscape and load_landscape(str(path)) is loaded
    assert json.loads(path.read_text())["format"] == FORMAT
    runner = loaded.runner(576, 256, 16)
    default = default_config()
    expected = synthetic(default, 16)
    assert runner.evaluate(default) == TrialResult(
        expected.status, expected.latency_us, expected.p20_us, expected.p80_us, measure_s=0.0
    )
    missing = runner.evaluate(KernelConfig(64, 128, 128, 32, 2, 2))
    assert (missing.status, missing.error) == (TrialStatus.INVALID, NOT_RECORDED)
    best, result = optimum(runner)
    assert best.BLOCK_SIZE_M == 64 and best.BLOCK_SIZE_N == 256
    assert result.latency_us == min(r.latency_us for r in runner.trials.values() if r.ok)
    with pytest.raises(KeyError, match=r"no \(N, K, M\) = \(1, 2, 3\)"):
        loaded.runner(1, 2, 3)
    path.write_text(landscape_json(make_landscape(m_values=(1,))))
    assert sorted(load_landscape(path).problems) == [(256, 384, 1), (576, 256, 1)]
    with pytest.raises(ValueError, match="^gone.json: No such file or directory$"):
        load_landscape("gone.json")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("{", "Expecting property name"),
        ('{"format": "other"}', "format is 'other'"),
        (json.dumps({"format": FORMAT}), "missing field 'problems'"),
        (json.dumps({"format": FORMAT, "problems": [{"rows": [[16, "ok"]]}]}), "not enough"),
    ],
)
def test_malformed_files_give_one_line(tmp_path, text, reason):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=f"^{path}: not a landscape file: .*{reason}") as info:
        load_landscape(path)
    assert "\n" not in str(info.value)


def test_replay_samples_are_reproducible_and_inside_the_recorded_spread():
    default, other = default_config(), KernelConfig(32, 64, 128, 1, 4, 3)
    trials = {
        default: TrialResult(TrialStatus.OK, 11.0, 10.0, 12.0),
        other: TrialResult(TrialStatus.OK, 20.0, 20.0, 20.0),
        KernelConfig(256, 64, 128, 1, 4, 5): TrialResult(TrialStatus.OUT_OF_RESOURCES),
    }
    first = RecordedTimings(trials)
    samples = [first.sample_us(default) for _ in range(4)]
    # the first four draws of this config, seeded with "64x128x128 g32 w4 s2#<n>"
    assert samples == pytest.approx([11.2428253, 10.4266206, 10.7177245, 10.6897940])
    assert first.sample_us(other) == 20.0  # no spread recorded, no spread replayed
    second = RecordedTimings(trials)  # a new runner starts the count again, per config
    assert second.sample_us(other) == 20.0
    assert [second.sample_us(default) for _ in range(4)] == samples
    many = [second.sample_us(default) for _ in range(200)]
    assert 10.0 <= min(many) < 10.1 and 11.9 < max(many) < 12.0
    with pytest.raises(
        ValueError,
        match=r"^cannot sample config 256x64x128 g1 w4 s5: "
        r"recorded as out_of_resources, not ok$",
    ):
        first.sample_us(KernelConfig(256, 64, 128, 1, 4, 5))
    with pytest.raises(ValueError, match="not in the landscape, not ok"):
        first.sample_us(KernelConfig(16, 64, 128, 1, 4, 2))
