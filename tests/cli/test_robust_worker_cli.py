"""`tuner worker` and `tuner sweep --no-run`: what they refuse, in one line with exit code 2."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from tests.cli.robust import write_landscape
from tuner.cli.app import app

runner = CliRunner()


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_landscape(tmp_path, (16,))
    args = "sweep --device L20 --model tiny --m 16 --strategy optuna --trials 3 --replay l20.json"
    created = runner.invoke(app, [*args.split(), "--no-run", "--db", "sqlite:///t.db"])
    assert created.exit_code == 0, created.output
    assert "sweep 1 (new): NVIDIA_L20, tiny TP 1, 2 shapes x 1 M, optuna, no run" in created.stdout
    return tmp_path


def one_line(args: list[str], expected: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines() == [f"error: {expected}"]


def test_worker_refuses_what_it_cannot_run(folder, no_visible_gpu):
    db = ["--db", "sqlite:///t.db"]
    one_line(
        ["worker", "--device", "L20", "--replay", "l20.json", "--sweep", "2", *db],
        "no sweep 2 in store sqlite:///t.db",
    )
    (folder / "c.json").write_text(
        '[{"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": '
        '128, "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 2}]'
    )
    args = "worker --device L20 --replay l20.json --configs c.json --sweep 1"
    result = runner.invoke(app, [*args.split(), *db])
    assert result.exit_code == 2
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
    result = runner.invoke(app, ["worker", "--device", "interpreter", "--db", "sqlite:///t.db"])
    assert result.exit_code == 0, result.output
    assert "nothing to do: no unfinished task in sweeps on TRITON_INTERPRETER (space vllm)" in (
        " ".join(result.stdout.split())
    )


def test_no_run_for_a_gpu_this_host_lacks(folder):
    args = "sweep --device H200 --model tiny --m 1 --no-run --db sqlite:///t.db"
    result = runner.invoke(app, args.split())
    assert result.exit_code == 0, result.output
    assert "sweep 2 (new): NVIDIA_H200, tiny TP 1, 2 shapes x 1 M, guided, no run" in (
        result.stdout
    )
    one_line(
        ["sweep", "--device", "bad name!", "--model", "tiny", "--no-run", "--db", "sqlite:///t.db"],
        "--device 'bad name!' is not a GPU model name such as L20 or NVIDIA_H200",
    )
