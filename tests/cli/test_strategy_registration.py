"""Adding a strategy is one module and one registration: a strategy registered at run time is a
`--strategy` choice in `tuner sweep --help`, a `strategy` of the HTTP API's schema, and a sweep
runs it in its spawned workers (spawn imports the program's main module, so they register it
too): the program, tests/cli/reversed_strategy.py."""

from __future__ import annotations

import runpy
import subprocess
import sys
from pathlib import Path

from api.app import create_app
from api.settings import Settings
from tests.cli.common import ok, query
from tests.cli.robust import CONFIGS, tuner_env, write_landscape
from tuner.core import CONFIG_KEYS
from tuner.kernels.dense.space import default_config
from tuner.search.registry import STRATEGIES


def test_a_registered_strategy_is_a_choice_in_help_and_in_the_api_schema(monkeypatch, tmp_path):
    monkeypatch.setitem(STRATEGIES, "reverse", None)  # removed again after the test
    runpy.run_module("tests.cli.reversed_strategy")  # registers `reverse`
    shown = ok("sweep", "--help", env={"COLUMNS": "200"})
    assert "--strategy <grid|optuna|guided|reverse>" in shown.output
    schema = create_app(Settings(db_url=f"sqlite:///{tmp_path / 't.db'}")).openapi()
    strategy = schema["components"]["schemas"]["SweepCreate"]["properties"]["strategy"]
    assert strategy["enum"] == ["grid", "optuna", "guided", "reverse"]
    assert strategy["default"] == "guided"


def test_a_sweep_runs_a_registered_strategy_and_stores_its_trials(tmp_path: Path) -> None:
    landscape, configs = write_landscape(tmp_path, (1,))
    args = "sweep --device L20 --model tiny --m 1 --strategy reverse --trials 2 --no-publish"
    program = [sys.executable, "-m", "tests.cli.reversed_strategy", *args.split()]
    program += ["--replay", str(landscape), "--configs", str(configs), "--db", "sqlite:///tuner.db"]
    options = {"cwd": tmp_path, "env": tuner_env(), "capture_output": True, "text": True}
    swept = subprocess.run(program, timeout=600, **options)
    assert swept.returncode == 0, swept.stderr
    tasks = query(
        tmp_path / "tuner.db",
        "SELECT task_id, N, K, strategy, state FROM tasks JOIN sweeps USING (sweep_id) ORDER BY N",
    )
    trials = query(
        tmp_path / "tuner.db",
        f"SELECT task_id, {', '.join(CONFIG_KEYS)}, is_default FROM trials ORDER BY trial_id",
    )
    assert [(n, k, strategy, state) for _, n, k, strategy, state in tasks] == [
        (256, 384, "reverse", "done"),
        (576, 256, "reverse", "done"),
    ]
    for task_id, *_ in tasks:
        # vLLM's default first (every task's baseline), then the space from its end.
        assert [row[1:] for row in trials if row[0] == task_id] == [
            (*default_config().as_dict().values(), 1),
            (*CONFIGS[-1].as_dict().values(), 0),
            (*CONFIGS[-2].as_dict().values(), 0),
        ]
