"""What the `tuner` CLI imports before a command runs (issue 39, point 9): commands import their
modules when they run, so `tuner --help` loads none of the heavy ones. Not timed: the exact
module lists, from a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Packages a command needs only while it runs: the store (db, sqlalchemy), the GPU and kernel
# stack (torch, triton, tuner.kernels), optuna, the service (fastapi, uvicorn) and the tuner's
# own working modules. The search's registry (tuner.search, numpy) loads with the CLI: its
# names are `--strategy`'s choices.
# pydantic: the service's models, and Typer's coercion of an unset flag (tuner.cli.app's
# GROUP_CONTEXT keeps the groups' --help set).
HEAVY = (
    "sqlalchemy",
    "torch",
    "triton",
    "optuna",
    "fastapi",
    "uvicorn",
    "pydantic",
    "db",
    "tuner.files",
    "tuner.compare",
    "tuner.run",
    "tuner.kernels",
    "tuner.measure",
    "tuner.inputs",
)

# The modules of HEAVY that the CLI does load at start, each a leaf of constants that an
# option's default or help names, importing nothing beyond the standard library:
LIGHT_AT_START = [
    "tuner.kernels",  # the search's KernelConfig
    "tuner.kernels.config",
    "tuner.measure",  # an empty package __init__ (the parent of rounds)
    "tuner.measure.rounds",  # RETIME_ROUNDS: `--rounds` of compare and verify
    "tuner.measure.trial",  # the search's TrialResult
    "tuner.run",  # an empty package __init__ (the parent of options)
    "tuner.run.options",  # DEFAULT_LEASE_S: `--lease` of sweep and verify (os, time, dataclasses)
]

# `import tuner.cli.app`, or building every command as `--help` does (typer.main.get_command),
# then the sorted names of the loaded modules in HEAVY, as JSON on stdout.
PROGRAM = """
import json, sys
import tuner.cli.app
if {build}:
    import typer.main
    typer.main.get_command(tuner.cli.app.app)
heavy = {heavy!r}
print(json.dumps(sorted(m for m in sys.modules
                        if any(m == h or m.startswith(h + ".") for h in heavy))))
"""


def loaded_heavy(*, build: bool) -> list[str]:
    """The modules of HEAVY loaded in a fresh interpreter by PROGRAM."""
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM.format(build=build, heavy=HEAVY)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)


def test_importing_the_cli_loads_no_heavy_module():
    assert loaded_heavy(build=False) == LIGHT_AT_START


def test_building_every_command_loads_nothing_more():
    assert loaded_heavy(build=True) == LIGHT_AT_START


@pytest.mark.parametrize("argv", [["--help"], ["verify", "--help"], ["shapes", "list", "--help"]])
def test_help_through_the_entry_point_loads_what_building_loads(argv):
    # The console script's main() (tuner.cli.guard.run_guarded) names store faults without
    # importing sqlalchemy first; the list goes to stderr, after --help's text on stdout.
    program = (
        "import atexit, json, sys\n"
        f"heavy = {HEAVY!r}\n"
        "atexit.register(lambda: print(json.dumps(sorted(m for m in sys.modules if any("
        "m == h or m.startswith(h + '.') for h in heavy))), file=sys.stderr))\n"
        f"sys.argv = {['tuner', *argv]!r}\n"
        "from tuner.cli.app import main\n"
        "main()\n"
    )
    done = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    usage = " ".join(["Usage: tuner", *argv[:-1]])
    assert done.stdout.startswith(f"{usage} [OPTIONS]")
    assert json.loads(done.stderr) == loaded_heavy(build=True)
