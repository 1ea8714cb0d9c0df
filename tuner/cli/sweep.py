"""`tuner sweep` and `tuner worker`: tune a model's shapes on the matching GPUs, or join sweeps
created elsewhere."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any

import typer

from tuner.cli.arguments import DEFAULT_M, load_configs, parse_m_values
from tuner.cli.devices import resolve_kernel_choice, resolve_runner
from tuner.cli.errors import fail
from tuner.cli.export import NoPublishOpt, publish_device
from tuner.cli.options import (
    DEFAULT_STRATEGY_NAME,
    ConfigsOpt,
    DbOpt,
    DeviceOpt,
    InterpreterRepsOpt,
    KernelChoice,
    KernelOpt,
    LeaseOpt,
    ModelOpt,
    OutDtypeOpt,
    ReplayOpt,
    TpOpt,
    TrialTimeoutOpt,
    strategy_names,
)
from tuner.cli.output import console, print_sweep_summary
from tuner.cli.store import masked, open_db
from tuner.cli.sweep_plan import DryRunOpt, YesOpt, default_lines, show_plan
from tuner.core import REQUIRED_M, OutDtype
from tuner.inputs.shapes import UnknownModelError, load_shapes
from tuner.run.interrupt import interrupted_exit
from tuner.run.options import DEFAULT_LEASE_S, RunOptions
from tuner.run.plan import model_requests, opened_label, plan, space_name
from tuner.run.supervisor import Supervisor
from tuner.run.sweep import commonest_failure, run_workers, unfinished_in_scope, worker_specs
from tuner.search.registry import DEFAULT_TRIALS

# `tuner sweep --strategy`: what each search does. The option's type is built with the command
# (`strategy_names`), so it stays in the signature.
STRATEGY_HELP = (
    "The search of each (N, K, M), among the registered strategies (docs/search.md); "
    "grid measures every config of the space whatever --trials."
)

SweepMOpt = Annotated[
    str,
    typer.Option(
        "--m",
        show_default="vLLM's 18 batch sizes, 1 to 4096",
        help="Batch sizes M, comma-separated.",
    ),
]
TrialsOpt = Annotated[
    int,
    typer.Option(
        min=1,
        max=100_000,
        help="Configs per (N, K, M) for "
        "every strategy but grid, vLLM's default config "
        "included (128: where guided reached 1.0 of the "
        "optimum, geomean, in bench/search_quality.py).",
    ),
]
SweepSeedOpt = Annotated[
    int, typer.Option(min=0, max=2**31 - 1, help="Seed of the search and of the random inputs.")
]
GpusOpt = Annotated[
    int | None,
    typer.Option(
        "--gpus",
        min=1,
        max=1024,
        help="With --dry-run: plan for a host with this many matching GPUs "
        "[default: the matching GPUs visible here].",
    ),
]
NoRunOpt = Annotated[
    bool,
    typer.Option(
        "--no-run", help="Only create the sweep and its tasks, for `tuner worker` on other hosts."
    ),
]


def sweep(
    device: DeviceOpt,
    model: ModelOpt,
    tp: TpOpt = None,
    m: SweepMOpt = DEFAULT_M,
    strategy: Annotated[
        strategy_names(),  # type: ignore[valid-type]  # Literal built at run time
        typer.Option(help=STRATEGY_HELP),
    ] = DEFAULT_STRATEGY_NAME,
    trials: TrialsOpt = DEFAULT_TRIALS,
    configs: ConfigsOpt = None,
    seed: SweepSeedOpt = 0,
    out_dtype: OutDtypeOpt = OutDtype.bfloat16,
    interpreter_reps: InterpreterRepsOpt = 3,
    replay: ReplayOpt = None,
    trial_timeout: TrialTimeoutOpt = None,
    no_run: NoRunOpt = False,
    lease: LeaseOpt = DEFAULT_LEASE_S,
    no_publish: NoPublishOpt = False,
    dry_run: DryRunOpt = False,
    gpus: GpusOpt = None,
    yes: YesOpt = False,
    kernel: KernelOpt = KernelChoice.auto,
    db: DbOpt = None,
) -> None:
    """Tune every (N, K) of a model over the M grid, one worker per matching GPU; then each
    fused-MoE expert shape of the model, one sweep each.

    Every trial is checked against a float64 reference and stored.
    Re-running the same command resumes where it stopped; with a larger --trials it extends
    the same sweep (only the new trials are measured). When every task is done the device's
    files are published as its next release (unless --no-publish). The plan (tasks, trials,
    compiles, a time estimate) is printed first; --dry-run prints only that.
    """

    if gpus is not None and not dry_run:
        raise fail("--gpus plans for another host: use it with --dry-run")
    m_values, model_shapes = _parse(m, model, tp)
    candidates = load_configs(configs)
    source, label = resolve_kernel_choice(kernel)
    runner, resolved = resolve_runner(
        device,
        replay,
        interpreter_reps=interpreter_reps,
        need_device=not no_run and gpus is None,
        plan_only=dry_run and not no_run and gpus is None,
    )
    device_name, visible = resolved.device_name, list(resolved.visible_ids)
    requests = model_requests(
        model_shapes,
        device_name=device_name,
        model=model_shapes.model,
        tp=model_shapes.tp,
        block_shape=model_shapes.block_shape,
        m_values=m_values,
        strategy=strategy,
        trials=trials,
        seed=seed,
        out_dtype=out_dtype.value,
        configs=candidates,
        replay=str(replay) if replay is not None else None,
        kernel=source,
        kernel_label=label,
    )
    if not show_plan(
        requests,
        db=db,
        runner=runner,
        workers=gpus if gpus is not None and runner.on_gpu else max(1, len(visible)),
        dry_run=dry_run,
        yes=yes,
        warnings=_grid_warnings(m_values),
        defaults=default_lines(model_shapes.model, model_shapes.tp, tp is not None, m),
        interpreter_reps=interpreter_reps,
    ):
        return
    url, store = open_db(db)
    options = RunOptions(lease_s=lease, trial_timeout_s=trial_timeout)
    for request, what in requests:
        _plan_and_run(
            store,
            url,
            request,
            what,
            no_run=no_run,
            runner=runner,
            visible=visible,
            options=options,
        )
    if not no_run and not no_publish:
        # The sweep's own kernel source: "auto" could read another source's trials here
        # (vLLM's wherever vLLM is installed, even when the sweep timed the builtin).
        publish_device(store, device_name, reason="tuner sweep", kernel=source)


def _parse(m: str, model: str, tp: int | None) -> tuple:
    """(--m's sorted M values, the model's shapes); a bad value exits 2 with one line."""

    try:
        m_values = parse_m_values(m)
        model_shapes = load_shapes(model, tp)
    except (ValueError, UnknownModelError) as exc:
        raise fail(str(exc).strip("'\"")) from None
    return m_values, model_shapes


def _grid_warnings(m_values: tuple[int, ...]) -> list[str]:
    """The warning line when the M grid lacks some of vLLM's batch sizes (`REQUIRED_M`)."""

    missing = [value for value in REQUIRED_M if value not in m_values]
    return (
        [f"warning: M grid lacks {missing}; vLLM will use the nearest tuned M there"]
        if missing
        else []
    )


def _plan_and_run(
    store, url: str, request, what: str, *, no_run: bool, runner, visible: list, options
) -> None:
    """Create, extend or find one sweep and run it to the end; exit 1 if tasks are left or no
    trial came out ok."""

    opened = plan(store, request)
    info = opened.info
    if opened.outcome == "kept" and request.strategy != "grid":
        request = replace(request, trials=info.budget)  # the stored sweep's budget stands
    workers = "no run" if no_run else f"{len(visible)} worker(s)"
    console.print(
        f"sweep {info.sweep_id} ({opened_label(opened)}): {request.device_name}, "
        f"{request.model} TP {request.tp}, {what} x "
        f"{len(request.m_values)} M, {request.strategy}, {workers}, store {masked(url)}, "
        f"kernel {request.kernel_label or request.kernel}",
        soft_wrap=True,
    )
    if no_run:
        console.print(
            f"run `tuner worker --device {request.device_name} --sweep "
            f"{info.sweep_id} --kernel {request.kernel}` with the same --db (and "
            "--configs, --replay) on each host",
            soft_wrap=True,
            markup=False,
            highlight=False,
        )
        return
    try:
        summary = run_workers(
            store,
            url,
            request,
            info.sweep_id,
            runner=runner,
            visible_devices=visible,
            console=console,
            options=options,
        )
    except KeyboardInterrupt as exc:  # Ctrl-C exits 130, SIGTERM 143
        code, what = interrupted_exit(exc)
        raise fail(
            f"{what}; finished trials are stored: run the same command to resume", code
        ) from None
    print_sweep_summary(summary)
    if (summary.trials_total or summary.tasks_failed) and not summary.trials_ok:
        # Every trial crashed or failed (e.g. an interpreter that cannot launch): not a success.
        raise fail(
            f"sweep {info.sweep_id}: no trial ok; {commonest_failure(store, info.sweep_id)}", 1
        )
    if summary.tasks_done != summary.tasks_total:
        raise fail(
            f"{summary.tasks_total - summary.tasks_done} task(s) not done; "
            "see the store, then re-run to resume",
            1,
        )


def worker(
    device: DeviceOpt,
    sweep_id: Annotated[
        int | None,
        typer.Option(
            "--sweep",
            min=1,
            max=2**31 - 1,
            help="Only tasks of this sweep [default: every sweep on the device].",
        ),
    ] = None,
    configs: ConfigsOpt = None,
    replay: ReplayOpt = None,
    interpreter_reps: InterpreterRepsOpt = 3,
    trial_timeout: TrialTimeoutOpt = None,
    lease: LeaseOpt = DEFAULT_LEASE_S,
    kernel: KernelOpt = KernelChoice.auto,
    db: DbOpt = None,
) -> None:
    """Join sweeps created elsewhere (`tuner sweep --no-run`, POST /sweeps): one worker per
    matching GPU claims their tasks from a shared store until none is left.

    Pass the --configs file (or --replay landscape) the sweep was created with: workers only
    take tasks of sweeps over their own config space.
    """

    candidates = load_configs(configs)
    source, label = resolve_kernel_choice(kernel)
    runner, resolved = resolve_runner(device, replay, interpreter_reps=interpreter_reps)
    device_name, visible = resolved.device_name, list(resolved.visible_ids)
    replay_path = str(replay) if replay is not None else None
    url, store = open_db(db, must_exist=True)
    scope: dict[str, Any] = {
        "sweep_id": sweep_id,
        "device_name": device_name,
        "space": space_name(candidates, replay_path, label),
    }
    try:
        unfinished = unfinished_in_scope(store, **scope)
    except LookupError:
        raise fail(f"no sweep {sweep_id} in store {masked(url)}") from None
    except ValueError as exc:
        raise fail(str(exc)) from None
    where = f"sweep {sweep_id}" if sweep_id is not None else f"sweeps on {device_name}"
    if not unfinished:
        return _say(f"nothing to do: no unfinished task in {where} (space {scope['space']})")
    _say(
        f"{len(visible)} worker(s) on {where}: {unfinished} unfinished task(s), store {masked(url)}"
    )
    options = RunOptions(lease_s=lease, trial_timeout_s=trial_timeout)
    specs = worker_specs(
        url,
        runner=runner,
        visible_devices=visible,
        configs=candidates,
        kernel=source,
        options=options,
        **scope,
    )
    supervisor = Supervisor(
        store, specs, trial_timeout_s=options.trial_timeout_for(runner), on_event=_say
    )
    try:
        report = supervisor.run()
    except KeyboardInterrupt as exc:  # Ctrl-C exits 130, SIGTERM 143
        code, what = interrupted_exit(exc)
        raise fail(f"{what}; the tasks went back to the queue", code) from None
    _say(
        f"worker done: {unfinished_in_scope(store, **scope)} unfinished task(s) left in "
        f"{where}; {report.crashed} crashed, {report.timeouts} timed out, "
        f"{report.restarts} restart(s)"
    )
    if report.given_up:
        raise fail(f"gave up on worker(s) {', '.join(report.given_up)}; see the lines above", 1)


def _say(line: str) -> None:
    """One plain line on stdout (no markup, no highlighting, never wrapped)."""
    console.print(line, soft_wrap=True, markup=False, highlight=False)
