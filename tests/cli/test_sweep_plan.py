"""`tuner sweep` prints its plan first; --dry-run writes nothing, plans for the matching GPUs
this host has, or says in one line that it has none; a long interpreter plan needs --yes."""

import pytest
from typer.testing import CliRunner

from tuner.cli.app import app
from tuner.measure import calibrate

runner = CliRunner()


@pytest.fixture
def measured_here(monkeypatch):
    """A trial measured on this host takes 1.5 s, twice what the model says at its shape."""
    monkeypatch.setattr(calibrate, "interpreter_trial_s", lambda interpreter_reps=3: 1.5)


def test_dry_run_prints_the_plan_and_creates_no_store(tmp_path, measured_here):
    store = tmp_path / "t.db"
    result = runner.invoke(
        app,
        [
            "sweep",
            "--device",
            "interpreter",
            "--model",
            "tiny",
            "--m",
            "1,16,32",
            "--trials",
            "3",
            "--dry-run",
            "--db",
            f"sqlite:///{store}",
        ],
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "plan: TRITON_INTERPRETER, tiny TP 1, guided",
        "  2 shapes x 3 M: 6 task(s) x 3 trial(s) = 18 trial(s)",
        "  total: 6 task(s), 18 trial(s) to run, 1 worker(s); about 29 s of measuring (no "
        "earlier trials of TRITON_INTERPRETER in the store: scaled by a trial measured here "
        "now, 1.50 s at N=256, K=256, M=16)",
        "  on the interpreter nothing is compiled ahead (that is a GPU's cost) and the timings "
        "are CPU timings",
        "  TP not given: 1, the only size shapes/tiny lists (--tp to choose)",
    ]
    assert not store.exists()


def test_a_long_interpreter_plan_exits_2_without_yes(tmp_path, measured_here):
    store = tmp_path / "t.db"
    result = runner.invoke(
        app,
        [
            "sweep",
            "--device",
            "interpreter",
            "--model",
            "qwen3.8-27b",
            "--db",
            f"sqlite:///{store}",
        ],
    )
    assert result.exit_code == 2, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "plan: TRITON_INTERPRETER, qwen3.8-27b TP 2, guided"
    assert lines[1] == "  5 shapes x 18 M: 90 task(s) x 128 trial(s) = 11,520 trial(s)"
    assert lines[-2:] == [
        "  M grid not given: vLLM's 18 batch sizes, 1 to 4096 (--m 1,16,32 for fewer)",
        "  TP not given: 2, the only size shapes/qwen3.8-27b lists (--tp to choose)",
    ]
    assert result.stderr.splitlines()[-1] == (
        "error: this plan is about 107.9 days on the interpreter, over 60 min: pass --yes to "
        "start it, or make it smaller with --m, --trials or --tp"
    )
    assert not store.exists()


def test_a_gpu_plan_can_be_shown_on_a_host_without_that_gpu(tmp_path, monkeypatch):
    _gpus(monkeypatch)
    result = runner.invoke(
        app,
        [
            "sweep",
            "--device",
            "H200",
            "--model",
            "qwen3.8-27b",
            "--tp",
            "2",
            "--m",
            "1,16",
            "--trials",
            "8",
            "--dry-run",
            "--db",
            f"sqlite:///{tmp_path}/t.db",
        ],
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[:2] == [
        "plan: NVIDIA_H200, qwen3.8-27b TP 2, guided",
        "  5 shapes x 2 M: 10 task(s) x 8 trial(s) = 80 trial(s); at most 80 distinct compiles",
    ]
    assert result.stderr.splitlines() == [
        "note: no visible GPU matches --device H200 here (visible: no CUDA GPU): the sweep would "
        "stop with that error; this plan is for one NVIDIA_H200, one worker per matching GPU "
        "where it runs (or --no-run there for `tuner worker`)",
        "warning: M grid lacks [32, 2048, 4096]; vLLM will use the nearest tuned M there",
    ]


def _gpus(monkeypatch, *names):
    """Make `tuner.run.gpus.visible_gpus` answer these GPU names (e.g. "NVIDIA L20")."""
    from tuner.core import vllm_device_name
    from tuner.run import gpus

    listed = [
        gpus.GpuInfo(i, str(i), name, vllm_device_name(name), "8.9") for i, name in enumerate(names)
    ]
    monkeypatch.setattr(gpus, "visible_gpus", lambda: listed)


def _workers_line(result) -> str:
    [line] = [line for line in result.stdout.splitlines() if line.startswith("  total:")]
    return line.split("; ")[0]


def test_a_dry_run_plans_for_the_matching_gpus_it_sees(tmp_path, monkeypatch):
    _gpus(monkeypatch, "NVIDIA L20", "NVIDIA H200", "NVIDIA L20")
    result = runner.invoke(
        app,
        [
            "sweep",
            "--device",
            "L20",
            "--model",
            "tiny",
            "--m",
            "1,16,32,2048,4096",
            "--trials",
            "8",
            "--dry-run",
            "--db",
            f"sqlite:///{tmp_path}/t.db",
        ],
    )
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    assert _workers_line(result) == "  total: 10 task(s), 80 trial(s) to run, 2 worker(s)"
    assert not (tmp_path / "t.db").exists()


def test_a_dry_run_without_the_gpu_says_so_in_one_line(tmp_path, monkeypatch):
    _gpus(monkeypatch, "NVIDIA H200")
    args = ["sweep", "--device", "L20", "--model", "tiny", "--m", "1,16,32,2048,4096"]
    args += ["--trials", "8", "--db", f"sqlite:///{tmp_path}/t.db"]
    result = runner.invoke(app, [*args, "--dry-run"])
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [
        "note: no visible GPU matches --device L20 here (visible: NVIDIA_H200): the sweep would "
        "stop with that error; this plan is for one NVIDIA_L20, one worker per matching GPU "
        "where it runs (or --no-run there for `tuner worker`)"
    ]
    assert _workers_line(result) == "  total: 10 task(s), 80 trial(s) to run, 1 worker(s)"
    # --gpus plans for the host it will run on, with no note; it is for plans only.
    planned = runner.invoke(app, [*args, "--dry-run", "--gpus", "4"])
    assert (planned.exit_code, planned.stderr) == (0, ""), planned.output
    assert _workers_line(planned) == "  total: 10 task(s), 80 trial(s) to run, 4 worker(s)"
    refused = runner.invoke(app, [*args, "--gpus", "4"])
    assert refused.exit_code == 2
    assert refused.stderr == "error: --gpus plans for another host: use it with --dry-run\n"
    real = runner.invoke(
        app, ["sweep", "--device", "L20", "--model", "tiny", "--db", f"sqlite:///{tmp_path}/t.db"]
    )
    assert real.exit_code == 2
    assert real.stderr.splitlines() == [
        "error: no visible GPU matches --device L20; visible: NVIDIA_H200"
    ]
    assert not (tmp_path / "t.db").exists()


def test_no_run_with_dry_run_needs_no_gpu_and_says_nothing(tmp_path, monkeypatch):
    _gpus(monkeypatch)
    result = runner.invoke(
        app,
        [
            "sweep",
            "--device",
            "L20",
            "--model",
            "tiny",
            "--m",
            "1,16,32,2048,4096",
            "--no-run",
            "--dry-run",
            "--db",
            f"sqlite:///{tmp_path}/t.db",
        ],
    )
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
