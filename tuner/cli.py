"""The `tuner` command line: sweep, worker, serve, db, and the shared options; the other commands
live in tuner/cli_*.py and register themselves on `app` when this module is imported."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from tuner.strategies.defaults import DEFAULT_STRATEGY, DEFAULT_TRIALS

app = typer.Typer(
    help="Autotune vLLM's W8A8 block-FP8 Triton GEMM over the full M grid, keep every timing, "
    "and serve merged vLLM config files.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
shapes_app = typer.Typer(help="Models and their (N, K) per TP size: list, show, and read them "
                         "from a server log or a config.json.",
                         no_args_is_help=True)
db_app = typer.Typer(help="Manage the store's schema.", no_args_is_help=True)
app.add_typer(shapes_app, name="shapes")
app.add_typer(db_app, name="db")

console = Console()

# Seconds a claimed task stays leased without a heartbeat (tuner.sweep.DEFAULT_LEASE_S).
DEFAULT_LEASE_S = 120.0


class StrategyName(StrEnum):
    grid = "grid"
    optuna = "optuna"
    local = "local"
    tpe_local = "tpe+local"


DEFAULT_STRATEGY_NAME = StrategyName(DEFAULT_STRATEGY)


class EngineName(StrEnum):
    vllm = "vllm"
    sglang = "sglang"


class OutDtype(StrEnum):
    bfloat16 = "bfloat16"
    float16 = "float16"


DbOpt = Annotated[
    str | None,
    typer.Option("--db", envvar="TUNER_DB_URL", show_envvar=True,
                 help="SQLAlchemy URL of the store (default: sqlite:///tuner.db in the current "
                 "folder); postgresql+psycopg://... to share one store between hosts."),
]
DeviceOpt = Annotated[
    str,
    typer.Option("--device", help="GPU model as vLLM names it (L20, NVIDIA_L20, H200, ...), or "
                 "'interpreter' for the CPU interpreter (device_name TRITON_INTERPRETER)."),
]
OutDtypeOpt = Annotated[
    OutDtype, typer.Option("--out-dtype", help="Output dtype of the GEMM (bf16 when serving).")
]
ConfigsOpt = Annotated[
    Path | None, typer.Option("--configs", help="JSON list of configs to search instead of "
                              "vLLM's 1,280-config space.")
]
ReplayOpt = Annotated[
    Path | None, typer.Option("--replay", help="Answer every trial from this landscape file "
                              "(recorded timings) instead of a device: for tests and search "
                              "benchmarks.")
]
InterpreterRepsOpt = Annotated[
    int, typer.Option("--interpreter-reps", min=1, help="Timed calls per trial on the "
                      "interpreter.")
]
TrialTimeoutOpt = Annotated[
    float | None, typer.Option("--trial-timeout", min=0.1, show_default="300 on a GPU, 1800 on "
                               "the interpreter", help="Seconds one config may take (compile, "
                               "check, timing); then its worker is killed, the config recorded "
                               "as timeout, and the task goes on in a new worker.")
]
# Hidden: tests shorten the lease so that tasks of killed workers come back in seconds.
LeaseOpt = Annotated[
    float, typer.Option("--lease", envvar="TUNER_LEASE_S", min=1.0, hidden=True,
                        help="Seconds a claimed task stays leased without a heartbeat.")
]

# The largest M the store keeps (a 32-bit INTEGER column on PostgreSQL).
MAX_M = 2**31 - 1

# vLLM's default batch sizes (benchmarks/kernels/benchmark_w8a8_block_fp8.py).
DEFAULT_M = "1,2,4,8,16,24,32,48,64,96,128,256,512,1024,1536,2048,3072,4096"


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print one line on stderr; return the Exit to raise."""
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def parse_m_values(text: str) -> tuple[int, ...]:
    """`"1,16,32"` -> (1, 16, 32), sorted and unique.

    Raises:
        ValueError: an entry is not a positive integer.
    """
    values = set()
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) < 1:
            raise ValueError(f"--m: '{part}' is not a positive integer (expected e.g. 1,16,32)")
        if int(part) > MAX_M:
            raise ValueError(f"--m: {part} is larger than {MAX_M} (the store keeps M as a "
                             "32-bit integer)")
        values.add(int(part))
    return tuple(sorted(values))


def _masked(url: str) -> str:
    from sqlalchemy import make_url

    return make_url(url).render_as_string(hide_password=True)


def _open_store(db: str | None, *, must_exist: bool = False):
    """(url, engine) of the store, its schema checked (and created for a new store).

    Args:
        db: --db, or None for $TUNER_DB_URL / sqlite:///tuner.db.
        must_exist: for commands that only read: refuse a SQLite file that does not exist (a
            mistyped --db would otherwise be created empty and read as "nothing yet").

    Raises:
        typer.Exit: one line, exit 2, when the store cannot be opened.
    """
    from sqlalchemy import make_url

    from db.engine import SchemaError, default_db_url, open_store

    url = db or default_db_url()
    if must_exist:
        try:
            parsed = make_url(url)
        except Exception:  # noqa: BLE001 - open_store below says what is wrong with it
            parsed = None
        if (parsed is not None and parsed.get_backend_name() == "sqlite"
                and parsed.database not in (None, "", ":memory:")
                and not Path(parsed.database).exists()):
            raise fail(f"no store at {_masked(url)}: run `tuner sweep` first, or point --db "
                       "(or TUNER_DB_URL) at the store")
    try:
        return url, open_store(url)
    except SchemaError as exc:
        raise fail(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - a bad URL or unreachable server: one line
        raise fail(f"cannot open store {_masked(url)}: {type(exc).__name__}: {exc}") from None


def _load_configs(path: Path | None):
    from tuner.configfile import parse_config_list
    from tuner.space import KernelConfig

    if path is None:
        return None
    try:
        items = parse_config_list(path.read_bytes().decode("utf-8"), source=str(path))
        return tuple(dict.fromkeys(KernelConfig.from_dict(item) for item in items))
    except OSError as exc:
        raise fail(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise fail(f"{path}: not UTF-8 text") from None
    except ValueError as exc:  # one line that names the file
        raise fail(str(exc)) from None


@app.command()
def sweep(
    device: DeviceOpt,
    model: Annotated[str, typer.Option(help="Model key from `tuner shapes list`.")],
    tp: Annotated[int | None, typer.Option(help="Tensor-parallel size (which shapes).")] = None,
    m: Annotated[str, typer.Option("--m", show_default="vLLM's 18 batch sizes, 1 to 4096",
                                   help="Batch sizes M, comma-separated.")] = DEFAULT_M,
    strategy: Annotated[
        StrategyName,
        typer.Option(help="local (default: the best of bench/search_quality.py): "
                     "neighbourhood search from vLLM's default and the winners the store knows "
                     "for the device; optuna: TPE; tpe+local: TPE, then local; --trials per "
                     "task. grid: every config of the space."),
    ] = DEFAULT_STRATEGY_NAME,
    trials: Annotated[int, typer.Option(min=1, max=100_000, help="Configs per (N, K, M) for "
                                        "local, optuna and tpe+local, vLLM's default config "
                                        "included (128: where local reached 0.999 of the "
                                        "optimum, geomean, in bench/search_quality.py).")
                       ] = DEFAULT_TRIALS,
    configs: ConfigsOpt = None,
    seed: Annotated[int, typer.Option(min=0, max=2**31 - 1, help="Seed of the search and of the "
                                      "random inputs.")] = 0,
    out_dtype: OutDtypeOpt = OutDtype.bfloat16,
    interpreter_reps: InterpreterRepsOpt = 3,
    replay: ReplayOpt = None,
    trial_timeout: TrialTimeoutOpt = None,
    no_run: Annotated[bool, typer.Option("--no-run", help="Only create the sweep and its "
                                         "tasks, for `tuner worker` on other hosts.")] = False,
    lease: LeaseOpt = DEFAULT_LEASE_S,
    db: DbOpt = None,
) -> None:
    """Tune every (N, K) of a model over the M grid, one worker per matching GPU.

    Every trial is checked against a float64 reference and stored.
    Re-running the same command resumes where it stopped.
    """
    from tuner.configfile import REQUIRED_M
    from tuner.shapes import UnknownModelError, load_shapes
    from tuner.sweep import SweepRequest, plan, run_workers

    try:
        m_values = parse_m_values(m)
        model_shapes = load_shapes(model, tp)
    except (ValueError, UnknownModelError) as exc:
        raise fail(str(exc).strip("'\"")) from None
    candidates = _load_configs(configs)
    backend, device_name, visible = _backend(device, replay, need_device=not no_run)
    missing = [value for value in REQUIRED_M if value not in m_values]
    if missing:
        typer.echo(f"warning: M grid lacks {missing}; vLLM will use the nearest tuned M there",
                   err=True)
    url, engine = _open_store(db)
    request = SweepRequest(
        device_name=device_name, model=model_shapes.model, tp=model_shapes.tp,
        shapes=model_shapes.shapes, block_shape=model_shapes.block_shape, m_values=m_values,
        strategy=strategy.value, trials=trials, seed=seed, out_dtype=out_dtype.value,
        configs=candidates, replay=str(replay) if replay is not None else None,
    )
    info, created = plan(engine, request)
    workers = "no run" if no_run else f"{len(visible)} worker(s)"
    console.print(
        f"sweep {info.sweep_id} ({'new' if created else 'resumed'}): {device_name}, "
        f"{model_shapes.model} TP {model_shapes.tp}, {len(model_shapes.shapes)} shapes x "
        f"{len(m_values)} M, {strategy.value}, {workers}, store {_masked(url)}",
        soft_wrap=True,
    )
    if no_run:
        console.print(f"run `tuner worker --device {device_name} --sweep {info.sweep_id}` "
                      "with the same --db (and --configs, --replay) on each host",
                      soft_wrap=True, markup=False, highlight=False)
        return
    try:
        summary = run_workers(engine, url, request, info.sweep_id, backend=backend,
                              visible_devices=visible, console=console,
                              interpreter_reps=interpreter_reps, trial_timeout_s=trial_timeout,
                              lease_s=lease)
    except KeyboardInterrupt:
        raise fail("interrupted; finished trials are stored: run the same command to resume",
                   130) from None
    print_sweep_summary(summary)
    if summary.tasks_done != summary.tasks_total:
        raise fail(f"{summary.tasks_total - summary.tasks_done} task(s) not done; "
                   "see the store, then re-run to resume", 1)


def print_sweep_summary(summary) -> None:
    """The closing lines of a sweep run (`tuner.sweep.summary_lines`)."""
    from tuner.sweep import summary_lines

    for line in summary_lines(summary):
        console.print(line, soft_wrap=True, markup=False, highlight=False)


def _backend(device: str, replay: Path | None, *, need_device: bool = True):
    """(backend, device_name, visible devices) for --device and --replay.

    With need_device=False a GPU model that no visible GPU matches is still accepted (its vLLM
    key, for creating a sweep that workers on other hosts run).
    """
    from tuner.devices import INTERPRETER_DEVICE_NAME, is_interpreter, matches, visible_gpus

    if replay is not None:
        from tuner.replay import load_landscape

        try:
            landscape = load_landscape(replay)
        except ValueError as exc:
            raise fail(str(exc)) from None
        if not matches(device, landscape.device_name):
            raise fail(f"--device {device} does not name the landscape's device "
                       f"{landscape.device_name}")
        return "replay", landscape.device_name, [None]
    if is_interpreter(device):
        return "interpreter", INTERPRETER_DEVICE_NAME, [None]
    gpus = visible_gpus() if need_device else []
    chosen = [gpu for gpu in gpus if matches(device, gpu.device_name)]
    if chosen:
        return "cuda", chosen[0].device_name, [gpu.visible_id for gpu in chosen]
    if not need_device:
        return "cuda", _vllm_key(device), []
    seen = ", ".join(sorted({g.device_name for g in gpus})) or "no CUDA GPU"
    raise fail(f"no visible GPU matches --device {device}; visible: {seen}")


def _vllm_key(device: str) -> str:
    import re

    from tuner.devices import DEVICE_NAME_PATTERN, vllm_device_name

    name = vllm_device_name(device)
    if not name.startswith(("NVIDIA_", "AMD_")):
        name = f"NVIDIA_{name}"
    if not re.fullmatch(DEVICE_NAME_PATTERN, name):
        raise fail(f"--device {device!r} is not a GPU model name such as L20 or NVIDIA_H200")
    return name


@app.command()
def worker(
    device: DeviceOpt,
    sweep_id: Annotated[int | None, typer.Option("--sweep", min=1, max=2**31 - 1,
                                                 help="Only tasks of this sweep [default: "
                                                 "every sweep on the device].")] = None,
    configs: ConfigsOpt = None,
    replay: ReplayOpt = None,
    interpreter_reps: InterpreterRepsOpt = 3,
    trial_timeout: TrialTimeoutOpt = None,
    lease: LeaseOpt = DEFAULT_LEASE_S,
    db: DbOpt = None,
) -> None:
    """Join sweeps created elsewhere (`tuner sweep --no-run`, POST /sweeps): one worker per
    matching GPU claims their tasks from a shared store until none is left.

    Pass the --configs file (or --replay landscape) the sweep was created with: workers only
    take tasks of sweeps over their own config space.
    """
    from db import repo
    from db.engine import session_scope
    from tuner.supervisor import Supervisor, default_trial_timeout_s
    from tuner.sweep import space_name, worker_specs

    candidates = _load_configs(configs)
    backend, device_name, visible = _backend(device, replay)
    space = space_name(candidates, str(replay) if replay is not None else None)
    url, engine = _open_store(db, must_exist=True)
    scope = {"sweep_id": sweep_id, "device_name": device_name, "space": space}
    with session_scope(engine) as session:
        if sweep_id is not None:
            info = repo.get_sweep(session, sweep_id=sweep_id)
            if info is None:
                raise fail(f"no sweep {sweep_id} in store {_masked(url)}")
            if info.device_name != device_name:
                raise fail(f"sweep {sweep_id} is for {info.device_name}, not {device_name}")
            if info.space != space:
                raise fail(f"sweep {sweep_id} searches config space {info.space}, this worker "
                           f"{space}: pass the --configs/--replay file the sweep was made with")
        unfinished = repo.unfinished_tasks(session, **scope)
    where = f"sweep {sweep_id}" if sweep_id is not None else f"sweeps on {device_name}"
    if not unfinished:
        console.print(f"nothing to do: no unfinished task in {where} (space {space})",
                      soft_wrap=True, markup=False, highlight=False)
        return
    console.print(f"{len(visible)} worker(s) on {where}: {unfinished} unfinished task(s), "
                  f"store {_masked(url)}", soft_wrap=True, markup=False, highlight=False)
    specs = worker_specs(url, backend=backend, visible_devices=visible, configs=candidates,
                         replay=str(replay) if replay is not None else None, lease_s=lease,
                         interpreter_reps=interpreter_reps, **scope)
    timeout_s = trial_timeout if trial_timeout is not None else default_trial_timeout_s(backend)
    supervisor = Supervisor(engine, specs, trial_timeout_s=timeout_s, on_event=lambda line:
                            console.print(line, soft_wrap=True, markup=False, highlight=False))
    try:
        report = supervisor.run()
    except KeyboardInterrupt:
        raise fail("interrupted; the tasks went back to the queue", 130) from None
    with session_scope(engine) as session:
        left = repo.unfinished_tasks(session, **scope)
    console.print(f"worker done: {left} unfinished task(s) left in {where}; "
                  f"{report.crashed} crashed, {report.timeouts} timed out, "
                  f"{report.restarts} restart(s)", soft_wrap=True, markup=False, highlight=False)
    if report.given_up:
        raise fail(f"gave up on worker(s) {', '.join(report.given_up)}; see the lines above", 1)


def _device_in_store(session, device: str) -> str:
    from db import repo
    from tuner.devices import resolve

    known = repo.list_device_names(session)
    names = resolve(device, known)
    if len(names) != 1:
        raise fail(f"no device in the store matches '{device}'; known: "
                   f"{', '.join(known) or 'none (run tuner sweep first)'}")
    return names[0]


# Commands kept in their own modules register themselves on `app` and `shapes_app`; imported
# last because they use the helpers above.
from tuner import cli_files, cli_landscape, cli_shapes, cli_store, cli_verify  # noqa: E402, F401


def main() -> None:
    """Console-script entry point."""
    from tuner.cli import app as registered  # under `python -m`, the module with the commands

    registered()


if __name__ == "__main__":
    main()
