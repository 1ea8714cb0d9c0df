"""The plan `tuner sweep` prints before it measures (`tuner.run.preview`), `--dry-run`, and the
`--yes` a long interpreter plan needs."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Annotated

import typer

from db.repo import known_configs, session_scope, stored_trials, sweep_key, trial_times
from tuner.cli.arguments import DEFAULT_M
from tuner.cli.errors import fail
from tuner.cli.output import plain
from tuner.cli.store import existing_store
from tuner.kernels.shape import store_columns
from tuner.measure import calibrate
from tuner.measure.runners import Runner, process_environment
from tuner.run.plan import SweepRequest
from tuner.run.preview import duration, needs_confirmation, preview_sweeps, trial_model

DryRunOpt = Annotated[
    bool,
    typer.Option(
        "--dry-run",
        help="Print the plan (tasks, trials, compiles, time "
        "estimate) and exit; the store is read, never written.",
    ),
]
YesOpt = Annotated[
    bool,
    typer.Option(
        "--yes", help="Start a plan estimated above an hour on the interpreter without asking."
    ),
]


def default_lines(model: str, tp: int, tp_given: bool, m: str) -> list[str]:
    """What the plan says about the values the user left to their defaults.

    Args:
        model: the model key.
        tp: the tensor-parallel size chosen.
        tp_given: --tp was passed.
        m: the --m text.

    Returns:
        One line for a defaulted M grid, one for a defaulted TP.
    """
    lines = []
    if m == DEFAULT_M:
        lines.append("M grid not given: vLLM's 18 batch sizes, 1 to 4096 (--m 1,16,32 for fewer)")
    if not tp_given:
        lines.append(f"TP not given: {tp}, the only size shapes/{model} lists (--tp to choose)")
    return lines


def _history(db: str | None, requests: list, runner: Runner) -> tuple[list, list[int], list]:
    """The device's earlier trial times, each request's stored trials, and per request the
    configs the store holds of each of its tasks' measurements in any sweep
    (`db.repo.known_configs`), read without creating a store (no store yet reads as an empty
    history; a server that does not answer is one line, exit 2:
    `tuner.cli.store.existing_store`)."""
    _, store = existing_store(db)
    if store is None:
        return [], [0] * len(requests), []
    with session_scope(store) as session:
        history = trial_times(session, device_name=requests[0][0].device_name)
        stored = [
            stored_trials(session, sweep_key=sweep_key(request.sweep_spec()))
            for request, _ in requests
        ]
        known = [
            known_configs(
                session,
                environment=_measurement(runner, request),
                **store_columns(request.family, request.params),
                block_shape=request.block_shape,
                out_dtype=request.out_dtype,
                space=request.space_name,
                tasks=[(N, K, M) for N, K in request.shapes for M in request.m_values],
            )
            for request, _ in requests
        ]
    store.dispose()
    return history, stored, known


def _measurement(runner: Runner, request: SweepRequest) -> dict[str, str]:
    """The device and versions the request's trials would be timed with: the runner's, or a
    recorded environment for a replay (off a GPU the runner's environment reads no device)."""
    if not runner.on_gpu:
        return runner.environment(request.kernel, request.family)
    return {
        **process_environment(request.kernel, request.family),
        "device_name": request.device_name,
    }


def show_plan(
    requests: list,
    *,
    db: str | None,
    runner,
    workers: int,
    defaults: list[str],
    dry_run: bool,
    yes: bool,
    warnings: Sequence[str] = (),
    interpreter_reps: int = 3,
) -> bool:
    """Print the plan of a `tuner sweep` in one block; say whether to go on.

    Args:
        requests: (SweepRequest, what it tunes) per sweep of the command.
        db: --db.
        runner: how the sweep measures (`tuner.measure.runners.Runner`).
        workers: processes that will measure.
        defaults: `default_lines`.
        dry_run: only print.
        yes: --yes was passed.
        warnings: lines for stderr, printed once the store was read (a store that cannot be
            opened is then the only line).
        interpreter_reps: timed calls per trial on the interpreter.

    Returns:
        True to measure; False after a dry run.

    Raises:
        typer.Exit: exit 2 when a plan above its model's `confirm_above_s` (an hour on the
            interpreter) was not confirmed.
    """
    history, stored, known = _history(db, requests, runner)
    for line in warnings:
        typer.echo(line, err=True)
    compile_workers = max(1, ((os.cpu_count() or 2) - workers) // max(1, workers))
    families = {request.family for request, _ in requests}
    model = trial_model(runner.name, interpreter_reps)
    calibration = None
    if model.calibrate and not families <= {row.family for row in history}:
        measured_s = calibrate.interpreter_trial_s(interpreter_reps)
        calibration = (calibrate.CALIBRATION_SHAPE, measured_s) if measured_s else None
    preview = preview_sweeps(
        requests,
        model=model,
        history=history,
        stored=stored,
        workers=workers,
        compile_workers=compile_workers,
        defaults=defaults,
        calibration=calibration,
        known=known,
    )
    for line in preview.lines:
        plain(line)
    if dry_run:
        return False
    if not yes and needs_confirmation(preview, model):
        longer = (
            f"this plan is about {duration(preview.estimate_s)} on the {runner.name}, "
            f"over {duration(model.confirm_above_s or 0)}"
        )
        if sys.stdin.isatty() and sys.stdout.isatty():
            if typer.confirm(f"{longer}; start it?", default=False):
                return True
        raise fail(
            f"{longer}: pass --yes to start it, or make it smaller with --m, --trials or --tp"
        )
    return True
