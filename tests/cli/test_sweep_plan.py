"""`tuner sweep` prints its plan first; --dry-run (or --gpus N, for a host with N matching GPUs)
writes nothing, plans for the matching GPUs this host has, or says in one line that it has none;
a long interpreter plan needs --yes.
`tuner worker` and `tuner sweep --no-run`: what they refuse, in one line with exit code 2."""

import json

import pytest

from tests.cli.common import invoke, ok, one_line_error
from tests.cli.robust import write_landscape
from tests.storefill import FAST
from tuner.core import vllm_device_name
from tuner.run import gpus

NOTE = (
    "note: no visible GPU matches --device {0} here (visible: {1}): the sweep would stop with "
    "that error; this plan is for one NVIDIA_{0}, one worker per matching GPU where it runs (or "
    "--no-run there for `tuner worker`)"
)


def sweep(tmp_path, args: str, code: int | None = None):
    return invoke("sweep", *args.split(), "--db", f"sqlite:///{tmp_path}/t.db", code=code)


def _gpus(monkeypatch, *names):
    """Make `tuner.run.gpus.visible_gpus` answer these GPU names (e.g. "NVIDIA L20")."""
    listed = [gpus.GpuInfo(i, str(i), n, vllm_device_name(n), "8.9") for i, n in enumerate(names)]
    monkeypatch.setattr(gpus, "visible_gpus", lambda: listed)


def _workers_line(result) -> str:
    [line] = [line for line in result.stdout.splitlines() if line.startswith("  total:")]
    return line.split("; ")[0]


def test_dry_run_prints_the_plan_and_creates_no_store(tmp_path):
    result = sweep(
        tmp_path, "--device interpreter --model tiny --m 1,16,32 --trials 3 --dry-run", code=0
    )
    lines = result.stdout.splitlines()  # the plan's lines: tests/tuner/run/test_preview.py
    assert lines[2].startswith("  total: 6 task(s), 18 trial(s) to run, 1 worker(s); about 14 s")
    assert lines[-1] == "  TP not given: 1, the only size shapes/tiny lists (--tp to choose)"
    assert not (tmp_path / "t.db").exists()


def test_a_long_interpreter_plan_exits_2_without_yes(tmp_path):
    result = sweep(tmp_path, "--device interpreter --model qwen3.8-27b", code=2)
    # The plan's counts: tests/tuner/run/test_preview.py; the defaults it states:
    assert result.stdout.splitlines()[-2:] == [
        "  M grid not given: vLLM's 18 batch sizes, 1 to 4096 (--m 1,16,32 for fewer)",
        "  TP not given: 2, the only size shapes/qwen3.8-27b lists (--tp to choose)",
    ]
    assert result.stderr.splitlines()[-1] == (
        "error: this plan is about 54.0 days on the interpreter, over 60 min: pass --yes to "
        "start it, or make it smaller with --m, --trials or --tp"
    )
    assert not (tmp_path / "t.db").exists()


def test_a_gpu_plan_can_be_shown_on_a_host_without_that_gpu(tmp_path, monkeypatch):
    _gpus(monkeypatch)
    result = sweep(
        tmp_path, "--device H200 --model qwen3.8-27b --tp 2 --m 1,16 --trials 8 --dry-run", code=0
    )
    assert result.stdout.splitlines()[:2] == [
        "plan: NVIDIA_H200, qwen3.8-27b TP 2, guided",
        "  5 shapes x 2 M: 10 task(s) x 8 trial(s) = 80 trial(s); at most 80 distinct compiles",
    ]
    assert result.stderr.splitlines() == [
        NOTE.format("H200", "no CUDA GPU"),
        "warning: M grid lacks [32, 2048, 4096]; vLLM will use the nearest tuned M there",
    ]


@pytest.mark.parametrize(
    ("visible", "more", "note", "workers"),
    [
        (("NVIDIA L20", "NVIDIA H200", "NVIDIA L20"), "--dry-run", None, 2),
        (("NVIDIA H200",), "--dry-run", NOTE.format("L20", "NVIDIA_H200"), 1),
        # --gpus alone plans for the host it will run on, with no note, and measures nothing
        (("NVIDIA H200",), "--gpus 4", None, 4),
        ((), "--no-run --dry-run", None, 1),
    ],
)
def test_a_plan_counts_the_matching_gpus(tmp_path, monkeypatch, visible, more, note, workers):
    _gpus(monkeypatch, *visible)
    result = sweep(
        tmp_path, f"--device L20 --model tiny --m 1,16,32,2048,4096 --trials 8 {more}", code=0
    )
    assert result.stderr.splitlines() == ([note] if note else [])
    line = f"  total: 10 task(s), 80 trial(s) to run, {workers} worker(s)"
    assert _workers_line(result) == line
    assert not (tmp_path / "t.db").exists()


def test_a_sweep_without_the_gpu_is_one_line(tmp_path, monkeypatch):
    _gpus(monkeypatch, "NVIDIA H200")
    real = sweep(tmp_path, "--device L20 --model tiny")
    one_line_error(real, "no visible GPU matches --device L20; visible: NVIDIA_H200")
    assert not (tmp_path / "t.db").exists()


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_landscape(tmp_path, (16,))
    args = "sweep --device L20 --model tiny --m 16 --strategy optuna --trials 3 --replay l20.json"
    created = ok(*args.split(), "--no-run", "--db", "sqlite:///t.db")
    assert "sweep 1 (new): NVIDIA_L20, tiny TP 1, 2 shapes x 1 M, optuna, no run" in created.stdout
    return tmp_path


def one_line(args: list[str], expected: str) -> None:
    one_line_error(invoke(*args), expected)


def test_worker_refuses_what_it_cannot_run(folder, no_visible_gpu):
    db = ["--db", "sqlite:///t.db"]
    one_line(
        ["worker", "--device", "L20", "--replay", "l20.json", "--sweep", "2", *db],
        "no sweep 2 in store sqlite:///t.db",
    )
    (folder / "c.json").write_text(json.dumps([FAST]))  # another space than the sweep's
    args = "worker --device L20 --replay l20.json --configs c.json --sweep 1"
    result = invoke(*args.split(), *db, code=2)
    assert result.stderr.startswith("error: sweep 1 searches config space vllm@replay:")
    assert "pass the --configs/--replay file and --kernel the sweep was made with" in result.stderr
    one_line(
        ["worker", "--device", "L20", *db],
        "no visible GPU matches --device L20; visible: no CUDA GPU",
    )
    one_line(
        ["worker", "--device", "interpreter", "--sweep", "1", *db],
        "sweep 1 is for NVIDIA_L20, not TRITON_INTERPRETER",
    )
    one_line(
        ["worker", "--device", "H200", "--replay", "l20.json", *db],
        "--device H200 does not name the landscape's device NVIDIA_L20",
    )


def test_worker_with_nothing_to_do_says_so(folder):
    result = ok("worker", "--device", "interpreter", "--db", "sqlite:///t.db")
    assert "nothing to do: no unfinished task in sweeps on TRITON_INTERPRETER (space vllm)" in (
        " ".join(result.stdout.split())
    )


def test_no_run_for_a_gpu_this_host_lacks(folder):
    args = "sweep --device H200 --model tiny --m 1 --no-run --db sqlite:///t.db"
    result = ok(*args.split())
    assert "sweep 2 (new): NVIDIA_H200, tiny TP 1, 2 shapes x 1 M, guided, no run" in (
        result.stdout
    )
