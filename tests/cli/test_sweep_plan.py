"""`tuner sweep` prints its plan first; --dry-run writes nothing, plans for the matching GPUs
this host has, or says in one line that it has none.
`tuner worker` and `tuner sweep --no-run`: what they refuse, in one line with exit code 2.

A sweep in which no trial came out ok (e.g. every interpreter launch crashed, as on Triton 3.6
under numpy >= 2.4) exits 1 with one line naming the commonest failure.

`tuner sweep` again with more --trials is another sweep that measures only the new trials: the
same trials as an uninterrupted run at the larger budget."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.landscape_file import landscape_from_results, landscape_json
from tests.cli.common import flat, invoke, ok, one_line_error, query
from tests.cli.robust import ENVIRONMENT, run_tuner, sweep_args, write_landscape
from tests.storefill import FAST
from tuner.core import CONFIG_KEYS, TrialStatus, vllm_device_name
from tuner.kernels.dense.space import default_config, vllm_space
from tuner.measure.trial import TrialResult
from tuner.run import gpus

NOTE = "note: no visible GPU matches --device {0} here (visible: {1}); planned for NVIDIA_{0}"


def sweep(tmp_path, args: str, code: int | None = None):
    return invoke("sweep", *args.split(), "--db", f"sqlite:///{tmp_path}/t.db", code=code)


def _gpus(monkeypatch, *names):
    """Make `tuner.run.gpus.visible_gpus` answer these GPU names (e.g. "NVIDIA L20")."""
    listed = [gpus.GpuInfo(i, str(i), n, vllm_device_name(n), "8.9") for i, n in enumerate(names)]
    monkeypatch.setattr(gpus, "visible_gpus", lambda: listed)


def test_a_plan_is_printed_and_writes_nothing_without_the_gpu(tmp_path, monkeypatch):
    _gpus(monkeypatch)  # none
    result = sweep(
        tmp_path, "--device interpreter --model tiny --m 1,16,32 --trials 3 --dry-run", code=0
    )
    lines = result.stdout.splitlines()  # the plan's lines: tests/tuner/run/test_preview.py
    assert lines[2].startswith("  total: 6 task(s), 18 trial(s) to run, 1 worker(s); about 14 s")
    # The plan's counts: tests/tuner/run/test_preview.py; the default M grid and TP:
    result = sweep(tmp_path, "--device interpreter --model qwen3.8-27b --dry-run", code=0)
    assert result.stdout.splitlines()[-1] == (
        "  total: 90 task(s), 11,520 trial(s) to run, 1 worker(s); about 54.0 days (default for "
        "a new device: no earlier trials of TRITON_INTERPRETER in the store)"
    )
    # A GPU's plan can be shown on a host without that GPU ...
    result = sweep(
        tmp_path, "--device H200 --model qwen3.8-27b --tp 2 --m 1,16 --trials 8 --dry-run", code=0
    )
    assert result.stdout.splitlines()[:2] == [
        "plan: NVIDIA_H200, qwen3.8-27b TP 2, guided",
        "  5 shapes x 2 M: 10 task(s) x 8 trial(s) = 80 trial(s)",
    ]
    assert result.stderr.splitlines() == [
        NOTE.format("H200", "no CUDA GPU"),
        "warning: M grid lacks [32, 2048, 4096]; vLLM will use the nearest tuned M there",
    ]
    # ... but not swept there.
    _gpus(monkeypatch, "NVIDIA H200")
    real = sweep(tmp_path, "--device L20 --model tiny")
    one_line_error(real, "no visible GPU matches --device L20; visible: NVIDIA_H200")
    assert not (tmp_path / "t.db").exists()


@pytest.mark.parametrize(
    ("visible", "more", "note", "workers"),
    [
        (("NVIDIA L20", "NVIDIA H200", "NVIDIA L20"), "--dry-run", None, 2),
        (("NVIDIA H200",), "--dry-run", NOTE.format("L20", "NVIDIA_H200"), 1),
        ((), "--no-run --dry-run", None, 1),
    ],
)
def test_a_plan_counts_the_matching_gpus(tmp_path, monkeypatch, visible, more, note, workers):
    _gpus(monkeypatch, *visible)
    result = sweep(
        tmp_path, f"--device L20 --model tiny --m 1,16,32,2048,4096 --trials 8 {more}", code=0
    )
    assert result.stderr.splitlines() == ([note] if note else [])
    [line] = [line for line in result.stdout.splitlines() if line.startswith("  total:")]
    assert line.split("; ")[0] == f"  total: 10 task(s), 80 trial(s) to run, {workers} worker(s)"
    assert not (tmp_path / "t.db").exists()


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_landscape(tmp_path, (16,))
    args = "sweep --device L20 --model tiny --m 16 --strategy optuna --trials 3 --replay l20.json"
    created = ok(*args.split(), "--no-run", "--db", "sqlite:///t.db")
    assert "sweep 1 (new): NVIDIA_L20, tiny TP 1, 2 shapes x 1 M, optuna, no run" in created.stdout
    return tmp_path


def test_worker_refuses_what_it_cannot_run_and_says_when_nothing_is_left(folder, no_visible_gpu):
    db = ["--db", "sqlite:///t.db"]
    (folder / "c.json").write_text(json.dumps([FAST]))  # another space than the sweep's
    args = "worker --device L20 --replay l20.json --configs c.json --sweep 1"
    result = invoke(*args.split(), *db, code=2)
    assert result.stderr.startswith("error: sweep 1 searches config space vllm@replay:")
    assert "pass the --configs/--replay file and --kernel the sweep was made with" in result.stderr
    for args, line in [
        ("--device L20 --replay l20.json --sweep 2", "no sweep 2 in store sqlite:///t.db"),
        ("--device L20", "no visible GPU matches --device L20; visible: no CUDA GPU"),
        ("--device interpreter --sweep 1", "sweep 1 is for NVIDIA_L20, not TRITON_INTERPRETER"),
        (
            "--device H200 --replay l20.json",
            "--device H200 does not name the landscape's device NVIDIA_L20",
        ),
    ]:
        one_line_error(invoke("worker", *args.split(), *db), line)
    result = ok("worker", "--device", "interpreter", *db)
    assert "nothing to do: no unfinished task in sweeps on TRITON_INTERPRETER (space vllm)" in (
        flat(result.stdout)
    )
    # A sweep for a GPU this host lacks can be created to run elsewhere.
    result = ok(*"sweep --device H200 --model tiny --m 1 --no-run".split(), *db)
    assert "sweep 2 (new): NVIDIA_H200, tiny TP 1, 2 shapes x 1 M, guided, no run" in (
        result.stdout
    )


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
    (tmp_path / "l20.json").write_text(landscape_json(landscape))
    (tmp_path / "configs.json").write_text(json.dumps([c.as_dict() for c in CONFIGS]))
    sweep = run_tuner(
        *sweep_args(tmp_path, f"sqlite:///{tmp_path}/t.db", "1", "--no-publish"),
        cwd=tmp_path,
        code=1,
    )
    errors = [line for line in sweep.stderr.splitlines() if line.startswith("error:")]
    # A replayed trial carries no error text; a measured one would name its exception here.
    assert errors == ["error: sweep 1: no trial ok; 6 of 10 trials crashed: no error text"]


def _sweep(folder: Path, db: str, trials: int, *more: str, m: str = "1,16") -> str:
    # optuna: its winners at 3 and 4 trials agree here, so do warm starts
    args = sweep_args(
        folder, f"sqlite:///{folder / db}", m, "--trials", str(trials), *more, strategy="optuna"
    )
    return " ".join(ok(*args).stdout.split())


SWEEP_CONFIGS = (
    f"SELECT N, K, M, {', '.join(CONFIG_KEYS)} FROM trials JOIN tasks USING (task_id) "
    "WHERE sweep_id = {} ORDER BY 1, 2, 3, 4, 5, 6, 7, 8, 9"
)


def test_more_trials_are_a_new_sweep_that_measures_only_the_new_ones(tmp_path: Path) -> None:
    write_landscape(tmp_path, (1, 16, 32))
    db = tmp_path / "t.db"
    first = _sweep(tmp_path, "t.db", 3)
    assert "sweep 1 (new): NVIDIA_L20, tiny TP 1, 2 shapes x 2 M, optuna" in first
    before = query(db, "SELECT * FROM trials ORDER BY trial_id")
    assert len(before) == 12

    more = _sweep(tmp_path, "t.db", 4)
    assert "sweep 2 (new): NVIDIA_L20, tiny TP 1, 2 shapes x 2 M, optuna, 1 worker(s)" in more
    assert (
        "sweep 2: 4/4 tasks done, 0 failed; 4 trials run now, 12 reused from other sweeps "
        "(16 stored, 16 ok)"
    ) in more
    # The first run's trials are untouched, and each task decided.
    assert query(db, "SELECT * FROM trials ORDER BY trial_id")[:12] == before
    assert query(db, "SELECT count(*) FROM decisions") == [(8,)]

    # The same trials as one run at --trials 4 (warm starts of the first run, same search).
    _sweep(tmp_path, "u.db", 4)
    assert query(db, SWEEP_CONFIGS.format(2)) == query(tmp_path / "u.db", SWEEP_CONFIGS.format(1))

    # The same command again: the finished sweep stands, nothing is measured or stored again.
    stored = query(db, "SELECT * FROM trials ORDER BY trial_id")
    again = _sweep(tmp_path, "t.db", 4)
    assert "sweep 2 (resumed): NVIDIA_L20" in again
    assert "sweep 2: 4/4 tasks done, 0 failed; 0 trials run now (16 stored" in again
    assert query(db, "SELECT * FROM trials ORDER BY trial_id") == stored

    # A larger M grid is another sweep, but its (N, K, M) at 1 and 16 are the same
    # measurements: their 16 trials are reused, only M = 32's are measured.
    wider = _sweep(tmp_path, "t.db", 4, m="1,16,32")
    assert "sweep 3 (new)" in wider
    assert (
        "sweep 3: 6/6 tasks done, 0 failed; 8 trials run now, 16 reused from other sweeps "
        "(24 stored, 23 ok)"
    ) in wider
    old, new = (
        query(
            db,
            "SELECT N, K, M, BLOCK_SIZE_M, BLOCK_SIZE_N, num_warps, num_stages, latency_us, "
            f"created_at FROM trials JOIN tasks USING (task_id) WHERE sweep_id = {sweep} "
            "AND M < 32 ORDER BY 1, 2, 3, 4, 5, 6, 7",
        )
        for sweep in (2, 3)
    )
    assert new == old and len(new) == 16
