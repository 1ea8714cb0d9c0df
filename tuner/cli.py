"""The `tuner` command line: sweep, export, serve, shapes, db."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(
    help="Autotune vLLM's W8A8 block-FP8 Triton GEMM over the full M grid, keep every timing, "
    "and serve merged vLLM config files.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
shapes_app = typer.Typer(help="List the models in shapes/ and their (N, K) per TP size.",
                         no_args_is_help=True)
db_app = typer.Typer(help="Manage the store's schema.", no_args_is_help=True)
app.add_typer(shapes_app, name="shapes")
app.add_typer(db_app, name="db")

console = Console()


class StrategyName(StrEnum):
    grid = "grid"
    optuna = "optuna"


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
        values.add(int(part))
    return tuple(sorted(values))


def _masked(url: str) -> str:
    from sqlalchemy import make_url

    return make_url(url).render_as_string(hide_password=True)


def _open_store(db: str | None):
    from db.engine import SchemaError, default_db_url, open_store

    url = db or default_db_url()
    try:
        return url, open_store(url)
    except SchemaError as exc:
        raise fail(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - a bad URL or unreachable server: one line
        raise fail(f"cannot open store {_masked(url)}: {type(exc).__name__}: {exc}") from None


def _load_configs(path: Path | None):
    from tuner.space import KernelConfig

    if path is None:
        return None
    try:
        items = json.loads(path.read_text())
        if not isinstance(items, list) or not items:
            raise ValueError("expected a non-empty JSON list of config objects")
        return tuple(dict.fromkeys(KernelConfig.from_dict(item) for item in items))
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        raise fail(f"{path}: {exc}") from None


@app.command()
def sweep(
    device: DeviceOpt,
    model: Annotated[str, typer.Option(help="Model key from `tuner shapes list`.")],
    tp: Annotated[int | None, typer.Option(help="Tensor-parallel size (which shapes).")] = None,
    m: Annotated[str, typer.Option("--m", show_default="vLLM's 18 batch sizes, 1 to 4096",
                                   help="Batch sizes M, comma-separated.")] = DEFAULT_M,
    strategy: Annotated[
        StrategyName,
        typer.Option(help="grid: every config of the space; optuna: TPE, --trials per task."),
    ] = StrategyName.optuna,
    trials: Annotated[int, typer.Option(min=1, help="Configs per (N, K, M) for optuna, vLLM's "
                                        "default config included.")] = 64,
    configs: Annotated[Path | None, typer.Option(help="JSON list of configs to search instead of "
                                                 "vLLM's 1,280-config space.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the search and of the random inputs.")] = 0,
    out_dtype: OutDtypeOpt = OutDtype.bfloat16,
    interpreter_reps: Annotated[int, typer.Option(min=1, help="Timed calls per trial on the "
                                                  "interpreter.")] = 3,
    replay: Annotated[Path | None, typer.Option(help="Answer every trial from this landscape "
                                                "file (recorded timings) instead of a device: "
                                                "for tests and search benchmarks.")] = None,
    db: DbOpt = None,
) -> None:
    """Tune every (N, K) of a model over the M grid, one worker per matching GPU.

    Every trial is checked against a float64 reference and stored.
    Re-running the same command resumes where it stopped.
    """
    from tuner.configfile import REQUIRED_M
    from tuner.devices import INTERPRETER_DEVICE_NAME, is_interpreter, matches, visible_gpus
    from tuner.shapes import UnknownModelError, load_shapes
    from tuner.sweep import SweepRequest, plan, run_workers

    try:
        m_values = parse_m_values(m)
        model_shapes = load_shapes(model, tp)
    except (ValueError, UnknownModelError) as exc:
        raise fail(str(exc).strip("'\"")) from None
    candidates = _load_configs(configs)
    if replay is not None:
        from tuner.replay import load_landscape

        try:
            landscape = load_landscape(replay)
        except ValueError as exc:
            raise fail(str(exc)) from None
        if not matches(device, landscape.device_name):
            raise fail(f"--device {device} does not name the landscape's device "
                       f"{landscape.device_name}")
        backend, device_name, visible = "replay", landscape.device_name, [None]
    elif is_interpreter(device):
        backend, device_name, visible = "interpreter", INTERPRETER_DEVICE_NAME, [None]
    else:
        gpus = visible_gpus()
        chosen = [gpu for gpu in gpus if matches(device, gpu.device_name)]
        if not chosen:
            seen = ", ".join(sorted({g.device_name for g in gpus})) or "no CUDA GPU"
            raise fail(f"no visible GPU matches --device {device}; visible: {seen}")
        backend, device_name = "cuda", chosen[0].device_name
        visible = [gpu.visible_id for gpu in chosen]
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
    console.print(
        f"sweep {info.sweep_id} ({'new' if created else 'resumed'}): {device_name}, "
        f"{model_shapes.model} TP {model_shapes.tp}, {len(model_shapes.shapes)} shapes x "
        f"{len(m_values)} M, {strategy.value}, {len(visible)} worker(s), store {_masked(url)}",
        soft_wrap=True,
    )
    try:
        summary = run_workers(engine, url, request, info.sweep_id, backend=backend,
                              visible_devices=visible, console=console,
                              interpreter_reps=interpreter_reps)
    except KeyboardInterrupt:
        raise fail("interrupted; finished trials are stored: run the same command to resume",
                   130) from None
    console.print(
        f"sweep {summary.sweep_id}: {summary.tasks_done}/{summary.tasks_total} tasks done, "
        f"{summary.tasks_failed} failed; {summary.trials_run_now} trials run now "
        f"({summary.trials_total} stored, {summary.trials_ok} ok); wall {summary.wall_s:.1f} s",
        soft_wrap=True,
    )
    if summary.tasks_done != summary.tasks_total:
        raise fail(f"{summary.tasks_total - summary.tasks_done} task(s) not done; "
                   "see the store, then re-run to resume", 1)


def _device_in_store(session, device: str) -> str:
    from db import repo
    from tuner.devices import resolve

    known = repo.list_device_names(session)
    names = resolve(device, known)
    if len(names) != 1:
        raise fail(f"no device in the store matches '{device}'; known: "
                   f"{', '.join(known) or 'none (run tuner sweep first)'}")
    return names[0]


@app.command()
def export(
    device: DeviceOpt,
    out: Annotated[Path, typer.Option(help="Folder to write the vLLM config files to.")],
    allow_partial: Annotated[bool, typer.Option(help="Also write files whose M grid is not "
                                                "fully tuned yet.")] = False,
    out_dtype: Annotated[OutDtype | None, typer.Option(help="Only trials with this output "
                                                       "dtype [default: all].")] = None,
    db: DbOpt = None,
) -> None:
    """Write one vLLM config file per (N, K) of a device from the winners in the store."""
    from db import repo
    from db.engine import session_scope
    from tuner.merge import build_device_files, write_files_atomically

    _, engine = _open_store(db)
    dtype = out_dtype.value if out_dtype else None
    with session_scope(engine) as session:
        device_name = _device_in_store(session, device)
        winners = repo.winners(session, device_name=device_name, out_dtype=dtype)
        coverage = repo.shape_coverage(session, device_name=device_name, out_dtype=dtype)
    result = build_device_files(winners, coverage, allow_partial=allow_partial)
    try:
        paths = write_files_atomically(result.files, out)
    except OSError as exc:
        raise fail(f"cannot write to {out}: {exc}") from None
    for file, path in zip(result.files, paths, strict=True):
        merged = file.merged
        console.print(f"wrote {path}  (M = {','.join(map(str, merged.configs))})",
                      soft_wrap=True, markup=False, highlight=False)
        for line in [*merged.notes, *merged.warnings]:
            console.print(f"    {line}", soft_wrap=True, markup=False, highlight=False)
    for skipped in result.skipped:
        typer.echo(f"skipped N={skipped.N},K={skipped.K}: {skipped.reason}", err=True)
    if not result.files:
        raise fail("no file written", 1)


@app.command()
def winners(
    device: DeviceOpt,
    out_dtype: Annotated[OutDtype | None, typer.Option(help="Only trials with this output "
                                                       "dtype [default: all].")] = None,
    db: DbOpt = None,
) -> None:
    """Per (N, K, M): the fastest checked config in the store against vLLM's default config."""
    from db import repo
    from db.engine import session_scope
    from tuner.space import KernelConfig

    _, engine = _open_store(db)
    with session_scope(engine) as session:
        device_name = _device_in_store(session, device)
        rows = repo.winners(session, device_name=device_name,
                            out_dtype=out_dtype.value if out_dtype else None)
    table = Table("N", "K", "M", "winner", "latency_us", "default_us", "speedup",
                  title=device_name)
    for row in rows:
        default_us = row.default_latency_us
        table.add_row(
            str(row.N), str(row.K), str(row.M), KernelConfig.from_dict(row.config).short(),
            f"{row.latency_us:.1f}", "-" if default_us is None else f"{default_us:.1f}",
            "-" if default_us is None else f"{default_us / row.latency_us:.2f}x",
        )
    console.print(table)


@app.command()
def serve(
    db: DbOpt = None,
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to bind.")] = 8000,
) -> None:
    """Serve the merged config files over HTTP (FastAPI under uvicorn)."""
    import uvicorn

    from api.app import create_app
    from api.settings import Settings

    url, _ = _open_store(db)
    uvicorn.run(create_app(Settings(db_url=url, host=host, port=port)), host=host, port=port)


@shapes_app.command("list")
def shapes_list() -> None:
    """Models with shapes, their TP sizes and descriptions."""
    from tuner.shapes import known_models, load_shapes, tp_sizes

    table = Table("model", "TP sizes", "description")
    for name in known_models():
        sizes = tp_sizes(name)
        table.add_row(name, ", ".join(map(str, sizes)), load_shapes(name, sizes[0]).description)
    console.print(table)


@shapes_app.command("show")
def shapes_show(
    model: Annotated[str, typer.Argument(help="Model key from `tuner shapes list`.")],
    tp: Annotated[int | None, typer.Option(help="Tensor-parallel size.")] = None,
) -> None:
    """The (N, K) of a model at one TP size, with their source."""
    from tuner.shapes import UnknownModelError, load_shapes

    try:
        entry = load_shapes(model, tp)
    except (UnknownModelError, ValueError) as exc:
        raise fail(str(exc).strip("'\"")) from None
    group_n, group_k = entry.block_shape
    console.print(f"{entry.model} TP {entry.tp}, block_shape [{group_n}, {group_k}]",
                  soft_wrap=True)
    table = Table("N", "K")
    for n, k in entry.shapes:
        table.add_row(str(n), str(k))
    console.print(table)
    console.print(f"source: {entry.source}", soft_wrap=True, markup=False)


@db_app.command("upgrade")
def db_upgrade(db: DbOpt = None) -> None:
    """Upgrade the store's schema to this version of the tuner (Alembic)."""
    from db.engine import default_db_url, make_engine, upgrade

    url = db or default_db_url()
    upgrade(make_engine(url))
    console.print(f"store {_masked(url)} is at the current schema", soft_wrap=True)


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
