"""Adding a strategy is one module and one registration (issue 25, item 2): a strategy that a
program registers at run time is a `--strategy` choice in `tuner sweep --help`, and a sweep runs
it in its spawned workers (spawn imports the program's main module, so they register it too)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tuner.kernels.dense.space import default_config

# A program that registers a test-only strategy, then runs the tuner's CLI. `reverse` measures
# the space from its end, ignoring warm starts, so its trials tell it apart from every builtin.
PROGRAM = """
import sys

from tuner.search.base import Strategy
from tuner.search.registry import STRATEGIES


class ReverseStrategy(Strategy):
    name = "reverse"

    def search(self, evaluate, *, space, budget, seed, warm_start=()):
        return [(config, evaluate(config)) for config in list(reversed(space))[:budget]]


STRATEGIES[ReverseStrategy.name] = ReverseStrategy

if __name__ == "__main__":
    from tuner.cli.app import main

    sys.argv[0] = "tuner"
    main()
"""
# Three configs of the dense space that run at the `tiny` shapes; vLLM's default is none.
KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")
SPACE = [dict(default_config().as_dict(), GROUP_SIZE_M=g) for g in (1, 8, 16)]


def run(folder: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(folder / "program.py"), *args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("registered")
    (home / "program.py").write_text(PROGRAM)
    (home / "configs.json").write_text(json.dumps(SPACE))
    return home


def test_a_registered_strategy_is_a_choice_in_help(folder: Path) -> None:
    shown = run(folder, "sweep", "--help")
    assert shown.returncode == 0, shown.stderr
    assert "--strategy <grid|optuna|local|tpe+local|ils|guided|reverse>" in shown.stdout


def test_a_sweep_runs_a_registered_strategy_and_stores_its_trials(folder: Path) -> None:
    swept = run(
        folder,
        "sweep",
        "--device",
        "interpreter",
        "--model",
        "tiny",
        "--m",
        "1",
        "--strategy",
        "reverse",
        "--trials",
        "2",
        "--configs",
        "configs.json",
        "--interpreter-reps",
        "1",
        "--no-publish",
        "--db",
        "sqlite:///tuner.db",
    )
    assert swept.returncode == 0, swept.stderr
    with sqlite3.connect(folder / "tuner.db") as connection:
        tasks = connection.execute(
            "SELECT task_id, N, K, strategy, state FROM tasks JOIN sweeps USING (sweep_id) "
            "ORDER BY N"
        ).fetchall()
        trials = connection.execute(
            f"SELECT task_id, {', '.join(KEYS)}, is_default, status FROM trials ORDER BY trial_id"
        ).fetchall()
    assert [(N, K, strategy, state) for _, N, K, strategy, state in tasks] == [
        (256, 384, "reverse", "done"),
        (576, 256, "reverse", "done"),
    ]
    for task_id, *_ in tasks:
        mine = [
            (dict(zip(KEYS, row[1:7], strict=True)), row[7], row[8])
            for row in trials
            if row[0] == task_id
        ]
        # vLLM's default first (every task's baseline), then the space from its end.
        assert mine == [
            (default_config().as_dict(), 1, "ok"),
            (SPACE[2], 0, "ok"),
            (SPACE[1], 0, "ok"),
        ]
