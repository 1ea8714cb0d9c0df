"""A sweep in which no trial came out ok (e.g. every interpreter launch crashed, as on Triton 3.6
under numpy >= 2.4) exits 1 with one line naming the commonest failure."""

import json

from tests.cli.robust import ENVIRONMENT, run_tuner, sweep_args
from tuner.core import TrialStatus
from tuner.kernels.dense.space import default_config, vllm_space
from tuner.measure.landscape import landscape_from_results
from tuner.measure.trial import TrialResult

CONFIGS = [default_config(), *vllm_space()[::320]]  # 5 configs, the default first


def outcome(index: int) -> TrialResult:
    """Three of five configs crash, two run out of shared memory."""
    if index % 5 < 3:
        return TrialResult(TrialStatus.CRASHED, error="worker died")
    return TrialResult(TrialStatus.OUT_OF_RESOURCES, error="shared memory")


def test_a_sweep_with_no_ok_trial_exits_1_naming_the_commonest_failure(tmp_path) -> None:
    landscape = landscape_from_results(
        device_name="NVIDIA_L20",
        environment=ENVIRONMENT,
        recorded_at="2026-12-01T00:00:00Z",
        space="vllm",
        out_dtype="bfloat16",
        block_shape=(128, 128),
        results=[
            (n, k, 1, config, outcome(i))
            for n, k in ((256, 384), (576, 256))
            for i, config in enumerate(CONFIGS)
        ],
    )
    (tmp_path / "l20.json").write_text(landscape.to_json())
    (tmp_path / "configs.json").write_text(json.dumps([c.as_dict() for c in CONFIGS]))
    sweep = run_tuner(
        *sweep_args(tmp_path, f"sqlite:///{tmp_path}/t.db", "1", "--no-publish"),
        cwd=tmp_path,
        code=1,
    )
    errors = [line for line in sweep.stderr.splitlines() if line.startswith("error:")]
    # A replayed trial carries no error text; a measured one would name its exception here.
    assert errors == ["error: sweep 1: no trial ok; 6 of 10 trials crashed: no error text"]
