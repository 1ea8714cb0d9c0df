"""`tuner sweep` and `tuner worker`: tune a model's shapes on the matching GPUs (its plan printed
first: `tuner.run.plan.plan_lines`), or join sweeps created elsewhere."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from db import repo
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
from tuner.run.plan import model_requests, plan_lines, space_name
from tuner.run.supervisor import interrupted
from tuner.run.sweep import commonest_failure, run_workers, supervisor
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
    source, label = resolve_kernel_choice(kernel)
    runner, resolved = resolve_runner(
        device,
        replay,
        interpreter_reps=interpreter_reps,
        need_device=not no_run,
        plan_only=dry_run and not no_run,
    )
    search = dict(strategy=strategy, trials=trials, seed=seed, out_dtype=out_dtype.value)
    requests = _requests(m, model, tp, resolved.device_name, configs, replay, source, label, search)
    visible = list(resolved.visible_ids)  # one worker each
    for line in _plan(requests, db, runner.name, len(visible), interpreter_reps):
        plain(line)
    if dry_run:
        return
    url, store = open_db(db)
    for request, what in requests:
        run_on = None if no_run else visible
        _plan_and_run(store, url, request, what, runner, run_on, trial_timeout)
    if not no_run and not no_publish:  # merged from the sweeps' own kernel source
        publish_device(store, resolved.device_name, reason="tuner sweep", kernel=source)


def _requests(m, model, tp, device_name, configs, replay, source, label, search) -> list:
    """The sweep requests of the model's shapes (`model_requests`) for --m, --model, --tp,
    --configs and --replay on the resolved device, kernel source and space label, with `search`
    (strategy, trials, seed, out_dtype); a bad value exits 2 with one line."""
    try:
        m_values, shapes = parse_m_values(m), load_shapes(model, tp)
    except (ValueError, UnknownModelError) as exc:
        raise fail(str(exc).strip("'\"")) from None
    return model_requests(
        shapes,
        device_name=device_name,
        m_values=m_values,
        configs=load_configs(configs),
        replay=None if replay is None else str(replay),
        kernel=source,
        kernel_label=label,
        **search,
    )


def _plan(requests: list, db: str | None, runner_name: str, workers: int, reps: int) -> list:
    """The plan of a `tuner sweep` (`plan_lines`), from the device's earlier trial times and
    each request's stored trials, read without creating a store file (none reads as an empty
    history; a server that does not answer is one line, exit 2); a warning first for an M grid
    without some of vLLM's batch sizes."""
    missing = [value for value in REQUIRED_M if value not in requests[0][0].m_values]
    if missing:
        typer.echo(
            f"warning: M grid lacks {missing}; vLLM will use the nearest tuned M there", err=True
        )
    _, store = existing_store(db)
    history, stored = [], [0] * len(requests)
    if store is not None:
        with repo.session_scope(store) as session:
            history = repo.trial_times(session, device_name=requests[0][0].device_name)
            trials = {sweep.sweep_key: sweep.trials_total for sweep in repo.list_sweeps(session)}
            stored = [trials.get(repo.sweep_key(r.sweep_spec()), 0) for r, _ in requests]
        store.dispose()
    return plan_lines(
        requests,
        runner_name=runner_name,
        reps=reps,
        history=history,
        stored=stored,
        workers=max(1, workers),
    )


def _plan_and_run(store, url: str, request, what: str, runner, visible, trial_timeout_s=None):
    """Create or find one sweep and run it with one worker per `visible` GPU, printing its
    summary, or with `visible` None only say how workers on other hosts join it. Exit 1 if
    tasks are left or no trial came out ok, 130 on Ctrl-C, 143 on SIGTERM."""
    with repo.session_scope(store) as session:
        info, created = repo.create_sweep(session, request.sweep_spec())
    sweep_id = info.sweep_id
    workers = "no run" if visible is None else f"{len(visible)} worker(s)"
    plain(
        f"sweep {sweep_id} ({'new' if created else 'resumed'}): {request.device_name}, "
        f"{request.model} TP {request.tp}, {what} x {len(request.m_values)} M, "
        f"{request.strategy}, {workers}, store {masked(url)}, "
        f"kernel {request.kernel_label or request.kernel}"
    )
    if visible is None:
        return plain(
            f"run `tuner worker --device {request.device_name} --sweep {sweep_id} --kernel "
            f"{request.kernel}` with the same --db (and --configs, --replay) on each host"
        )
    try:
        now, lines = run_workers(
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
        raise fail(*interrupted(exc)) from None
    for line in lines:
        plain(line)
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
    unfinished = _unfinished(store, url, scope)
    where = f"sweeps on {resolved.device_name}" if sweep_id is None else f"sweep {sweep_id}"
    if not unfinished:
        return plain(f"nothing to do: no unfinished task in {where} (space {space})")
    visible = list(resolved.visible_ids)  # one worker each
    plain(
        f"{len(visible)} worker(s) on {where}: {unfinished} unfinished task(s), store {masked(url)}"
    )
    try:
        report = supervisor(
            store,
            url,
            runner=runner,
            visible_devices=visible,
            configs=candidates,
            kernel=source,
            trial_timeout_s=trial_timeout,
            on_event=plain,
            **scope,
        ).run()
    except KeyboardInterrupt as exc:
        raise fail(*interrupted(exc)) from None
    plain(
        f"worker done: {_unfinished(store, url, scope)} unfinished task(s) left in {where}; "
        f"{report.crashed} crashed, "
        f"{report.timeouts} timed out, {report.restarts} restart(s)"
    )
    if report.given_up:
        raise fail(f"gave up on worker(s) {', '.join(report.given_up)}; see the lines above", 1)


def _unfinished(store, url: str, scope: dict[str, Any]) -> int:
    """The unfinished tasks a worker with this `scope` (sweep_id, device_name, space) would
    claim (`tuner worker`); a sweep that is not in the store, or is on another device or over
    another config space, exits 2 with one line."""
    sweep_id, device_name, space = scope["sweep_id"], scope["device_name"], scope["space"]
    with repo.session_scope(store) as session:
        found = [] if sweep_id is None else repo.list_sweeps(session, sweep_id=sweep_id)
        unfinished = repo.unfinished_tasks(session, **scope)
    info = found[0] if found else None
    if sweep_id is not None and info is None:
        raise fail(f"no sweep {sweep_id} in store {masked(url)}")
    if info is not None and info.device_name != device_name:
        raise fail(f"sweep {sweep_id} is for {info.device_name}, not {device_name}")
    if info is not None and info.space != space:
        raise fail(
            f"sweep {sweep_id} searches config space {info.space}, this worker {space}: pass "
            "the --configs/--replay file and --kernel the sweep was made with"
        )
    return unfinished
