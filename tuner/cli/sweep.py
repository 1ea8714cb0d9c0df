"""`tuner sweep` and `tuner worker`: tune a model's shapes on the matching GPUs (its plan printed
first: `tuner.run.plan.plan_lines`), or join sweeps created elsewhere."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from db.repo import create_sweep, session_scope, stored_trials, sweep_key, trial_times
from tuner.cli.arguments import DEFAULT_M, load_configs, parse_m_values
from tuner.cli.devices import resolve_kernel_choice, resolve_runner
from tuner.cli.errors import fail
from tuner.cli.export import NoPublishOpt, publish_device
from tuner.cli.options import (
    ConfigsOpt,
    DbOpt,
    DeviceOpt,
    DryRunOpt,
    InterpreterRepsOpt,
    KernelOpt,
    ModelOpt,
    NoRunOpt,
    OutDtypeOpt,
    ReplayOpt,
    SweepIdOpt,
    SweepMOpt,
    SweepSeedOpt,
    TpOpt,
    TrialsOpt,
    TrialTimeoutOpt,
    strategy_names,
)
from tuner.cli.output import console, plain
from tuner.cli.store import existing_store, masked, open_db
from tuner.core import REQUIRED_M, OutDtype
from tuner.inputs.shapes import UnknownModelError, load_shapes
from tuner.measure.runner import Runner
from tuner.run.plan import model_requests, plan_lines, space_name
from tuner.run.supervisor import interrupted, interrupted_exit
from tuner.run.sweep import (
    commonest_failure,
    run_workers,
    summary_lines,
    supervisor,
    unfinished_in_scope,
    worker_specs,
)
from tuner.search.registry import DEFAULT_STRATEGY, DEFAULT_TRIALS

# `tuner sweep --strategy`: its type is built with the command (`strategy_names`), so a
# strategy registered at run time is listed in --help.
STRATEGY_HELP = (
    "The search of each (N, K, M), among the registered strategies (docs/search.md); "
    "grid measures every config of the space whatever --trials."
)


def sweep(
    device: DeviceOpt,
    model: ModelOpt,
    tp: TpOpt = None,
    m: SweepMOpt = DEFAULT_M,
    strategy: Annotated[
        strategy_names(),  # type: ignore[valid-type]  # Literal built at run time
        typer.Option(help=STRATEGY_HELP),
    ] = DEFAULT_STRATEGY,
    trials: TrialsOpt = DEFAULT_TRIALS,
    configs: ConfigsOpt = None,
    seed: SweepSeedOpt = 0,
    out_dtype: OutDtypeOpt = OutDtype.bfloat16,
    interpreter_reps: InterpreterRepsOpt = 3,
    replay: ReplayOpt = None,
    trial_timeout: TrialTimeoutOpt = None,
    no_run: NoRunOpt = False,
    no_publish: NoPublishOpt = False,
    dry_run: DryRunOpt = False,
    kernel: KernelOpt = "auto",
    db: DbOpt = None,
) -> None:
    """Tune every (N, K) of a model over the M grid, one worker per matching GPU; then each
    fused-MoE expert shape of the model, one sweep each.

    Every trial is checked against a float64 reference and stored. Re-running the same command
    resumes where it stopped; with a larger --trials only the new trials are measured. When
    every task is done the device's files are published as its next release (unless
    --no-publish). The plan (tasks, trials, time) comes first."""
    plan_here = (not no_run, dry_run and not no_run)
    search = dict(strategy=strategy, trials=trials, seed=seed, out_dtype=out_dtype.value)
    runner, resolved, requests = _requests(
        (m, model, tp), device, replay, kernel, plan_here, interpreter_reps, configs, search
    )
    visible = list(resolved.visible_ids)  # one worker each
    _show_plan(requests, db, runner, len(visible), interpreter_reps)
    if not dry_run:
        _run_all(requests, db, runner, visible, no_run, no_publish, trial_timeout)


def _requests(what, device, replay, kernel, plan_here, reps, configs, search):
    """(runner, resolved device, the sweep requests of the model's shapes): `what` (--m, --model,
    --tp) read, --kernel, --device and --replay resolved (`plan_here`: a device is needed, only
    a plan is printed), then one request per family of the model with `search` (strategy,
    trials, seed, out_dtype). A bad value exits 2 with one line."""
    m, model, tp = what
    try:
        m_values, shapes = parse_m_values(m), load_shapes(model, tp)
    except (ValueError, UnknownModelError) as exc:
        raise fail(str(exc).strip("'\"")) from None
    source, label = resolve_kernel_choice(kernel)
    need_device, plan_only = plan_here
    runner, resolved = resolve_runner(
        device, replay, interpreter_reps=reps, need_device=need_device, plan_only=plan_only
    )
    requests = model_requests(
        shapes,
        device_name=resolved.device_name,
        m_values=m_values,
        configs=load_configs(configs),
        replay=None if replay is None else str(replay),
        kernel=source,
        kernel_label=label,
        **search,
    )
    return runner, resolved, requests


def _run_all(requests, db, runner, visible, no_run, no_publish, trial_timeout_s) -> None:
    """Run every sweep of the command (`_plan_and_run`), then publish the device's files
    unless --no-run or --no-publish, merged from the sweeps' own kernel source: "auto"
    could read another source's trials here (vLLM's wherever vLLM is installed, even when
    the sweep timed the builtin)."""
    url, store = open_db(db)
    for request, what in requests:
        _plan_and_run(
            store,
            url,
            request,
            what,
            no_run=no_run,
            runner=runner,
            visible=visible,
            trial_timeout_s=trial_timeout_s,
        )
    if not no_run and not no_publish:
        first = requests[0][0]
        publish_device(store, first.device_name, reason="tuner sweep", kernel=first.kernel)


def _history(db: str | None, requests: list) -> tuple[list, list[int]]:
    """The device's earlier trial times and each request's stored trials, read without
    creating a store (none yet reads as an empty history; a server that does not answer is
    one line, exit 2)."""
    _, store = existing_store(db)
    if store is None:
        return [], [0] * len(requests)
    with session_scope(store) as session:
        history = trial_times(session, device_name=requests[0][0].device_name)
        stored = [
            stored_trials(session, sweep_key=sweep_key(request.sweep_spec()))
            for request, _ in requests
        ]
    store.dispose()
    return history, stored


def _show_plan(requests: list, db, runner: Runner, workers: int, reps: int) -> None:
    """Print the plan of a `tuner sweep` in one block, after a warning for an M grid without
    some of vLLM's batch sizes."""
    history, stored = _history(db, requests)
    m_values = requests[0][0].m_values
    missing = [value for value in REQUIRED_M if value not in m_values]
    if missing:
        typer.echo(
            f"warning: M grid lacks {missing}; vLLM will use the nearest tuned M there", err=True
        )
    lines = plan_lines(
        requests,
        runner_name=runner.name,
        reps=reps,
        history=history,
        stored=stored,
        workers=max(1, workers),
    )
    for line in lines:
        plain(line)


def _plan_and_run(
    store,
    url: str,
    request,
    what: str,
    *,
    no_run: bool,
    runner,
    visible: list,
    trial_timeout_s: float | None = None,
) -> None:
    """Create or find one sweep and run it to the end (`_run`), or with `no_run` only
    say how workers on other hosts join it."""
    with session_scope(store) as session:
        info, created = create_sweep(session, request.sweep_spec())
    sweep_id = info.sweep_id
    workers = "no run" if no_run else f"{len(visible)} worker(s)"
    plain(
        f"sweep {sweep_id} ({'new' if created else 'resumed'}): {request.device_name}, "
        f"{request.model} TP {request.tp}, {what} x {len(request.m_values)} M, "
        f"{request.strategy}, {workers}, store {masked(url)}, "
        f"kernel {request.kernel_label or request.kernel}"
    )
    if no_run:
        return plain(
            f"run `tuner worker --device {request.device_name} --sweep {sweep_id} --kernel "
            f"{request.kernel}` with the same --db (and --configs, --replay) on each host"
        )
    _run(store, url, request, sweep_id, runner, visible, trial_timeout_s)


def _run(store, url, request, sweep_id, runner, visible, trial_timeout_s) -> None:
    """Run sweep `sweep_id` with one worker per `visible` GPU and print its summary; exit 1 if
    tasks are left or no trial came out ok, 130 on Ctrl-C, 143 on SIGTERM."""
    try:
        summary = run_workers(
            store,
            url,
            request,
            sweep_id,
            runner=runner,
            visible_devices=visible,
            console=console,
            trial_timeout_s=trial_timeout_s,
        )
    except KeyboardInterrupt as exc:  # here: Click would turn SIGTERM's exit code into 130
        raise fail(interrupted(exc), interrupted_exit(exc)[0]) from None
    for line in summary_lines(summary):
        plain(line)
    now = summary.now
    if (now.trials_total or now.tasks_failed) and not now.trials_ok:
        raise fail(f"sweep {sweep_id}: no trial ok; {commonest_failure(store, sweep_id)}", 1)
    if now.tasks_done != now.tasks_total:
        left = now.tasks_total - now.tasks_done
        raise fail(f"{left} task(s) not done; see the store, then re-run to resume", 1)


def worker(
    device: DeviceOpt,
    sweep_id: SweepIdOpt = None,
    configs: ConfigsOpt = None,
    replay: ReplayOpt = None,
    interpreter_reps: InterpreterRepsOpt = 3,
    trial_timeout: TrialTimeoutOpt = None,
    kernel: KernelOpt = "auto",
    db: DbOpt = None,
) -> None:
    """Join sweeps created elsewhere (`tuner sweep --no-run`, POST /sweeps): one worker per
    matching GPU claims their tasks from a shared store until none is left.

    Pass the --configs file (or --replay landscape) the sweep was created with: workers only
    take tasks of sweeps over their own config space."""
    candidates = load_configs(configs)
    source, label = resolve_kernel_choice(kernel)
    runner, resolved = resolve_runner(device, replay, interpreter_reps=interpreter_reps)
    url, store = open_db(db, must_exist=True)
    space = space_name(candidates, None if replay is None else str(replay), label)
    scope: dict[str, Any] = dict(sweep_id=sweep_id, device_name=resolved.device_name, space=space)
    try:
        unfinished = unfinished_in_scope(store, **scope)
    except LookupError:
        raise fail(f"no sweep {sweep_id} in store {masked(url)}") from None
    except ValueError as exc:
        raise fail(str(exc)) from None
    where = f"sweeps on {resolved.device_name}" if sweep_id is None else f"sweep {sweep_id}"
    if not unfinished:
        return plain(f"nothing to do: no unfinished task in {where} (space {space})")
    visible = list(resolved.visible_ids)  # one worker each
    plain(
        f"{len(visible)} worker(s) on {where}: {unfinished} unfinished task(s), store {masked(url)}"
    )
    specs = worker_specs(
        url, runner=runner, visible_devices=visible, configs=candidates, kernel=source, **scope
    )
    try:
        report = supervisor(store, specs, trial_timeout, plain).run()
    except KeyboardInterrupt as exc:
        raise fail(interrupted(exc), interrupted_exit(exc)[0]) from None
    left = unfinished_in_scope(store, **scope)
    plain(
        f"worker done: {left} unfinished task(s) left in {where}; {report.crashed} crashed, "
        f"{report.timeouts} timed out, {report.restarts} restart(s)"
    )
    if report.given_up:
        raise fail(f"gave up on worker(s) {', '.join(report.given_up)}; see the lines above", 1)
